// Tower's dashboard: notifications over tower-sse/client, the live client count, a chart of
// connects/refusals per second, the bus and, with Redis, every instance. Plain ES modules, no build step.
import { TowerSseClient } from '/vendor/tower-sse-client/index.js'
import uPlot from '/vendor/uplot.js'

const STATS_URL = '/api/events/stats'
const STATS_EVERY_MS = 1000
// A dashboard that cannot reach the stats route asks less often, not more.
const STATS_AFTER_ERROR_MS = 5000
const MAX_NOTIFICATIONS = 50

const $ = (id) => document.getElementById(id)

// ---- Connection status ------------------------------------------------------------------------

const connection = $('connection')
let countdown = null

/** What to tell the user about a wait, by its reason and HTTP status. */
function waitText (state) {
  if (state.reason === 'refused') return state.status === 429 ? 'Too many connections' : 'Server full'
  if (state.reason === 'server-error') return `Server error (HTTP ${state.status})`
  if (state.reason === 'network-error') return 'Connection lost'
  return 'Stream ended'
}

function showState (state) {
  clearInterval(countdown)
  countdown = null
  connection.dataset.state = state.kind
  if (state.kind === 'connecting') {
    connection.textContent = state.attempt > 1 ? `Connecting (attempt ${state.attempt})…` : 'Connecting…'
  } else if (state.kind === 'open') {
    connection.textContent = 'Live'
  } else if (state.kind === 'closed') {
    connection.textContent = state.error ? `Stopped: ${state.error.message.replace(/^tower-sse\/client: /, '')}` : 'Disconnected'
  } else {
    const tick = () => {
      const seconds = Math.max(0, Math.ceil((state.retryAt - Date.now()) / 1000))
      connection.textContent = `${waitText(state)} — retrying in ${seconds} s`
    }
    tick()
    countdown = setInterval(tick, 250)
  }
}

// ---- Notifications ----------------------------------------------------------------------------

const list = $('notifications')
const template = $('notification-template')
// 24-hour clock time, short enough for chart ticks too.
const clock = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false })

function showNotification (notification) {
  const item = template.content.firstElementChild.cloneNode(true)
  // textContent only: notification fields come from any producer and are never HTML.
  item.querySelector('.badge').textContent = notification.type
  item.querySelector('.badge').dataset.type = notification.type
  item.querySelector('.title').textContent = notification.title
  item.querySelector('.body').textContent = notification.body
  const time = item.querySelector('.time')
  time.dateTime = new Date().toISOString()
  time.textContent = clock.format(new Date())
  const workspace = item.querySelector('.workspace')
  if (notification.workspace) workspace.textContent = notification.workspace
  else workspace.remove()
  item.dataset.id = notification.id
  list.prepend(item)
  while (list.children.length > MAX_NOTIFICATIONS) list.lastElementChild.remove()
  $('empty').hidden = true
}

// ---- Stats and chart --------------------------------------------------------------------------

const WINDOW_SECONDS = 60
const chartBox = $('chart')
const chartHeight = () => (chartBox.clientWidth < 480 ? 160 : 220)
// eslint-disable-next-line new-cap -- uPlot's own name for its class
const chart = new uPlot({
  width: chartBox.clientWidth,
  height: chartHeight(),
  scales: {
    // Always the whole last minute (what the stats route keeps), ending at the newest sample.
    x: { time: true, range: (_u, _min, max) => { const end = max ?? Date.now() / 1000; return [end - WINDOW_SECONDS, end] } },
    y: { range: (_u, _min, max) => [0, Math.max(5, max ?? 0)] }
  },
  series: [
    {},
    { label: 'Connects', stroke: '#2563eb', fill: 'rgba(37, 99, 235, 0.10)', width: 2 },
    { label: 'Refused', stroke: '#dc2626', fill: 'rgba(220, 38, 38, 0.10)', width: 2 }
  ],
  // Counts per second are whole numbers: no 0.5 ticks.
  // One line of clock time per tick: uPlot's default adds a date line that crowds a narrow chart.
  axes: [{ space: 80, size: 32, values: (_u, splits) => splits.map((s) => clock.format(new Date(s * 1000))) }, { size: 44, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000] }],
  legend: { live: false },
  // Room on the right for the newest tick's label.
  padding: [8, 28, 0, 0]
}, [[], [], []], chartBox)
new ResizeObserver(() => chart.setSize({ width: chartBox.clientWidth, height: chartHeight() })).observe(chartBox)

function showStats (stats) {
  $('clients').textContent = String(stats.current)
  $('capacity').textContent = ` / ${stats.capacity}`
  $('connects').textContent = String(stats.lastMinute.connects)
  $('rejects').textContent = String(stats.lastMinute.rejects)
  const seconds = stats.perSecond.map((s) => s.t / 1000)
  chart.setData([seconds, stats.perSecond.map((s) => s.connects), stats.perSecond.map((s) => s.rejects)])
  showBus(stats.bus)
  showInstances(stats.instances, stats.bus)
}

// ---- Bus and instances ------------------------------------------------------------------------

/** "up" or "down", which also picks the colour. */
function setBusState (element, state) {
  element.textContent = state
  element.dataset.state = state
}

function showBus (bus) {
  $('bus-kind').textContent = bus.kind === 'redis' ? 'Redis' : 'memory'
  setBusState($('bus-state'), bus.state)
}

/** One cell; its label heads it when a narrow window stacks the table. */
function cell (tag, className, label, text) {
  const element = document.createElement(tag)
  element.className = className
  if (label !== null) element.dataset.label = label
  element.textContent = text
  return element
}

function instanceRow (instance, isThis) {
  const row = document.createElement('tr')
  row.dataset.id = instance.id
  // textContent only: any client of the Redis can write an instance's entry (the server checks its shape, not its text).
  const name = cell('th', 'instance-name', null, '')
  name.scope = 'row'
  name.append(cell('span', 'instance-host', null, instance.host), cell('span', 'instance-pid', null, `pid ${instance.pid}`))
  if (isThis) name.append(cell('span', 'instance-this', null, 'this one'))
  const state = cell('span', 'bus-state', null, '')
  setBusState(state, instance.bus)
  const bus = cell('td', 'instance-bus', 'Bus', '')
  bus.append(state)
  row.append(
    name,
    cell('td', 'instance-current', 'Streams', String(instance.current)),
    cell('td', 'instance-accepted', 'Accepted', String(instance.accepted)),
    cell('td', 'instance-rejected', 'Refused', String(instance.rejected)),
    bus
  )
  return row
}

/** With the Redis bus the stats list every live instance, the one that answered first; without it, none. */
function showInstances (instances, bus) {
  $('cluster').hidden = !Array.isArray(instances)
  if (!Array.isArray(instances)) return
  $('instances').replaceChildren(...instances.map((instance, i) => instanceRow(instance, i === 0)))
  $('cluster-note').hidden = bus.state !== 'down'
}

async function pollStats () {
  let delay = STATS_EVERY_MS
  // A hidden tab skips the request but keeps its rhythm.
  if (!document.hidden) {
    try {
      const response = await fetch(STATS_URL, { cache: 'no-store' })
      if (!response.ok) throw new Error(`HTTP ${response.status}`)
      showStats(await response.json())
      $('stats-note').hidden = true
    } catch (error) {
      $('stats-note').textContent = `Stats unavailable (${error.message}); trying again in ${STATS_AFTER_ERROR_MS / 1000} s.`
      $('stats-note').hidden = false
      delay = STATS_AFTER_ERROR_MS
    }
  }
  setTimeout(pollStats, delay)
}

// ---- Wiring -----------------------------------------------------------------------------------

// Every dashboard tab of this browser shares one stream (one of the browser's 6 connections per
// host, one of the server's slots): one tab holds it and relays to the others.
const client = new TowerSseClient('/api/events')
client.addEventListener('statechange', (event) => showState(event.state))
client.addEventListener('rolechange', () => { connection.dataset.role = client.tabRole })
client.addEventListener('message', (event) => {
  const message = JSON.parse(event.data)
  // The first message of every stream only says which client this is.
  if (message.type !== 'connected') showNotification(message)
})
client.addEventListener('resync', () => { $('resync-note').hidden = false })
showState(client.state)
void pollStats()
