/**
 * EventSource conformance: the same cases against tower-sse/client and, as a control, the
 * `eventsource` package (4.1, a spec-compliant EventSource for Node), over a real server on
 * loopback. The cases port the expectations of that package's own suite (test/tests.ts) and of
 * web-platform-tests eventsource/ (as far as they apply outside a browser page); `from` names them.
 *
 * A case that must differ says so in `differs`, and asserts each side's behaviour explicitly:
 * - `tower`: a deliberate difference of tower-sse/client (docs/client.md "Differences from EventSource");
 * - `control`: where eventsource@4.1 itself departs from the spec (the tower-sse side asserts the spec).
 */
import t, { type Test } from 'tap'
import { EventSource } from 'eventsource'
import { TowerSseClient, type TowerSseClientState } from '../lib/client'
import { startConformanceServer, UNICODE_LINES, type ConformanceServer } from './fixtures/conformance-server'
import { waitFor } from './fixtures/sse-connection'

interface Source extends EventTarget {
  readonly url: string
  readonly readyState: number
  readonly withCredentials: boolean
  readonly CONNECTING: number
  readonly OPEN: number
  readonly CLOSED: number
  onopen: ((event: Event) => unknown) | null
  onmessage: ((event: MessageEvent) => unknown) | null
  onerror: ((event: Event) => unknown) | null
  close: () => void
}
interface Init { withCredentials?: boolean, fetch?: typeof fetch }
type Kind = 'tower-sse/client' | 'eventsource'

interface Env {
  kind: Kind
  tower: boolean
  open: (url: string | URL, init?: Init) => Source
  Class: { CONNECTING: number, OPEN: number, CLOSED: number }
  server: ConformanceServer
  origin: string
}

interface Case {
  name: string
  from: string
  differs?: { tower?: string, control?: string }
  run: (t: Test, env: Env) => Promise<void>
}

interface Seen { type: string, data: string, lastEventId: string, origin: string, readyState: number, isTarget: boolean, event: Event }

/** Every event of the given types, in order, with the readyState at the moment it fired. */
function record (es: Source, types: string[]): Seen[] {
  const seen: Seen[] = []
  for (const type of types) {
    es.addEventListener(type, (event) => {
      const { data, lastEventId, origin } = event as MessageEvent<string>
      seen.push({ type, data, lastEventId, origin, readyState: es.readyState, isTarget: event.target === es, event })
    })
  }
  return seen
}
const ofType = (seen: Seen[], type: string): Seen[] => seen.filter((s) => s.type === type)
const until = (what: string, condition: () => boolean): Promise<void> => waitFor(what, condition, 8000)
const raw = (origin: string, body: string, extra = ''): string => `${origin}/raw?body=${encodeURIComponent(Buffer.from(body, 'utf8').toString('base64'))}${extra}`
/** A window in which a reconnect (retry: 250) would have happened: a count, not a speed. */
const reconnectWindow = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 600))

function counter (name: string): ((...args: unknown[]) => void) & { calls: number } {
  const fn = Object.assign(() => { fn.calls++ }, { calls: 0 })
  Object.defineProperty(fn, 'name', { value: name })
  return fn
}

const CASES: Case[] = [
  {
    name: 'connects, receives a named event with its data and origin, closes',
    from: 'eventsource: can connect, receive message, manually disconnect',
    run: async (t, { open, origin, Class }) => {
      const es = open(new URL('/welcome', origin))
      const seen = record(es, ['welcome'])
      await until('welcome', () => seen.length === 1)
      t.match(seen[0], { data: 'Hello, world!', origin })
      es.close()
      t.equal(es.readyState, Class.CLOSED)
    }
  },
  {
    name: 'url is the absolute URL, from a string or a URL',
    from: 'eventsource: can connect using URL string only; WPT eventsource-url',
    run: async (t, { open, origin }) => {
      t.equal(open(`${origin}/welcome?a=1`).url, `${origin}/welcome?a=1`)
      t.equal(open(new URL('/welcome', origin)).url, `${origin}/welcome`)
    }
  },
  {
    name: 'the target of open, message and error events is the instance',
    from: 'eventsource: `target` on open, message and error events',
    run: async (t, { open, origin }) => {
      const es = open(`${origin}/end-after-one`)
      const seen = record(es, ['open', 'progress', 'error'])
      await until('an error', () => ofType(seen, 'error').length >= 1)
      t.same([...new Set(seen.map((s) => s.type))], ['open', 'progress', 'error'])
      t.ok(seen.every((s) => s.isTarget))
    }
  },
  {
    name: 'fetch is called with cache: no-store; the server sees Accept: text/event-stream',
    from: 'eventsource: passes `no-store` to `fetch`; WPT request-accept',
    run: async (t, { open, origin }) => {
      const inits: RequestInit[] = []
      const es = open(`${origin}/echo-headers`, { fetch: (url, init) => { inits.push(init ?? {}); return fetch(url, init) } })
      const seen = record(es, ['message'])
      await until('the echo', () => seen.length === 1)
      t.equal(inits[0].cache, 'no-store')
      t.equal(JSON.parse(seen[0].data).accept, 'text/event-stream')
    }
  },
  {
    name: 'unicode data arrives intact',
    from: 'eventsource: can handle unicode data correctly; WPT format-utf-8',
    run: async (t, { open, origin }) => {
      const seen = record(open(`${origin}/unicode`), ['unicode'])
      await until('two events', () => seen.length === 2)
      t.same(seen.map((s) => s.data), UNICODE_LINES)
    }
  },
  {
    name: 'UTF-8 even when the content type names another charset',
    from: 'WPT format-utf-8 (charset=windows-1252)',
    run: async (t, { open, origin }) => {
      const seen = record(open(raw(origin, 'data: ok…\n\n', `&type=${encodeURIComponent('text/event-stream; charset=windows-1252')}`)), ['message'])
      await until('the event', () => seen.length === 1)
      t.equal(seen[0].data, 'ok…')
    }
  },
  {
    name: 'onopen receives open events; setting it to null unsubscribes',
    from: 'eventsource: can use `es.onopen`, nulling it unsubscribes; WPT eventsource-onopen',
    run: async (t, { open, origin }) => {
      const es = open(`${origin}/counter`)
      const seen = record(es, ['open', 'error'])
      const onOpen = counter('onOpen')
      es.onopen = onOpen
      t.equal(es.onopen, onOpen, 'the attribute reads back')
      // Unset right after the second open, before that stream ends.
      es.addEventListener('open', () => { if (onOpen.calls === 2) es.onopen = null })
      await until('four ends', () => ofType(seen, 'error').length >= 4)
      t.equal(onOpen.calls, 2)
      t.ok(ofType(seen, 'open').length >= 4)
    }
  },
  {
    name: 'onerror receives error events; setting it to null unsubscribes; a new handler replaces the old',
    from: 'eventsource: `es.onerror` nulling and redeclaring',
    run: async (t, { open, origin }) => {
      const es = open(`${origin}/counter`)
      const first = counter('first')
      const second = counter('second')
      let opens = 0
      // Swapped from an open listener, as soon as the stream opens: the stream ends right after.
      es.addEventListener('open', () => {
        opens++
        if (opens === 3) es.onerror = second
        if (opens === 4) es.onerror = null
      })
      es.onerror = first
      await until('five opens', () => opens === 5)
      t.same([first.calls, second.calls], [2, 1])
    }
  },
  {
    name: 'onmessage receives explicit and implicit message events, never named ones',
    from: 'eventsource: `es.onmessage` for explicit/implicit `message` events, not for other events; WPT eventsource-onmessage',
    run: async (t, { open, origin }) => {
      for (const [query, expected] of [['event=message', 3], ['event=', 3], ['event=counter', 0]] as const) {
        const es = open(`${origin}/counter?${query}`)
        const seen = record(es, ['error'])
        const onMessage = counter('onMessage')
        es.onmessage = onMessage
        // Unset at the end of the first stream, before the reconnect.
        es.addEventListener('error', () => { es.onmessage = null }, { once: true })
        await until('the second end', () => seen.length >= 2)
        t.equal(onMessage.calls, expected, query)
        es.close()
      }
    }
  },
  {
    name: 'a message event carries data, type, lastEventId and origin; not cancelable',
    from: 'eventsource: message event contains correct properties',
    run: async (t, { open, origin }) => {
      const seen = record(open(`${origin}/counter`), ['counter'])
      await until('a counter event', () => seen.length >= 1)
      t.match(seen[0], { data: 'Counter is at 1', type: 'counter', lastEventId: '1', origin })
      t.match(seen[0].event, { cancelable: false, defaultPrevented: false, timeStamp: Number })
      t.ok(seen[0].event instanceof MessageEvent)
    }
  },
  {
    name: 'the server ends the stream: error with readyState CONNECTING, then a reconnect with Last-Event-ID',
    from: 'eventsource: will reconnect with last received message id; WPT eventsource-reconnect',
    run: async (t, { open, origin, server, Class }) => {
      const url = `${origin}/counter`
      const es = open(url)
      const seen = record(es, ['counter', 'error'])
      await until('a counter event', () => seen.length >= 1)
      t.equal(seen[0].readyState, Class.OPEN)
      await until('the end of the first stream', () => ofType(seen, 'error').length >= 1)
      t.equal(ofType(seen, 'error')[0].readyState, Class.CONNECTING, 'error fires with CONNECTING')
      t.equal(seen.findIndex((s) => s.type === 'error'), 3, 'after the three events of the stream')
      await until('eight events', () => ofType(seen, 'counter').length >= 8)
      t.equal(es.url, url)
      t.match(ofType(seen, 'counter')[7], { data: 'Counter is at 8', lastEventId: '8', origin })
      t.same(server.lastEventIds('/counter').filter((id) => id !== '').slice(0, 2).map(Number).map((n) => n % 3), [0, 0], 'each reconnect sends the last id seen')
    }
  },
  {
    name: 'no reconnect after close()',
    from: 'eventsource: will not reconnect after explicit `close()`; WPT eventsource-close',
    run: async (t, { open, origin, Class }) => {
      const id = `close-${Math.random()}`
      const url = `${origin}/identified?client-id=${id}`
      const es = open(url)
      const seen = record(es, ['message', 'error', 'open'])
      await until('the first message', () => ofType(seen, 'message').length === 1)
      es.close()
      t.equal(es.readyState, Class.CLOSED)
      await reconnectWindow()
      t.same(await (await fetch(url)).json(), { clientIdConnects: 1 })
      t.same(seen.map((s) => s.type), ['open', 'message'], 'nothing after close()')
    }
  },
  {
    name: 'close() in an error listener prevents the reconnect',
    from: 'eventsource: will not reconnect after explicit `close()` in `onError`',
    run: async (t, { open, origin, Class }) => {
      const id = `close-in-error-${Math.random()}`
      const url = `${origin}/identified?client-id=${id}&auto-close=true`
      const es = open(url)
      const errors = counter('onError')
      es.addEventListener('error', () => { errors(); es.close() })
      await until('the error', () => errors.calls === 1)
      t.equal(es.readyState, Class.CLOSED)
      await reconnectWindow()
      t.same(await (await fetch(url)).json(), { clientIdConnects: 1 })
      t.equal(errors.calls, 1)
    }
  },
  {
    name: 'readyState: CONNECTING, OPEN, CONNECTING after the end, CLOSED after close()',
    from: 'eventsource: will have correct ready state throughout lifecycle; WPT eventsource-readyState',
    run: async (t, { open, origin, Class }) => {
      const es = open(`${origin}/slow-connect`)
      const seen = record(es, ['open', 'error'])
      t.equal(es.readyState, Class.CONNECTING)
      await until('the end', () => ofType(seen, 'error').length >= 1)
      t.same(seen.slice(0, 2).map((s) => [s.type, s.readyState]), [['open', Class.OPEN], ['error', Class.CONNECTING]])
      es.close()
      t.equal(es.readyState, Class.CLOSED)
    }
  },
  {
    name: 'HTTP 204 on a reconnect closes for good',
    from: 'eventsource: will close stream on HTTP 204',
    differs: { tower: 'a 204 says the client has the whole answer: tower-sse/client fires `end` (an Event) and closes with no error; EventSource fails the connection (error with CLOSED)' },
    run: async (t, { open, origin, tower, Class }) => {
      const es = open(`${origin}/end-after-one`)
      const seen = record(es, ['progress', 'error', 'end'])
      if (tower) {
        await until('the end', () => es.readyState === Class.CLOSED)
        t.same(seen.map((s) => [s.type, s.readyState]), [['progress', Class.OPEN], ['error', Class.CONNECTING], ['end', Class.CONNECTING]],
          'the stream ended (error with CONNECTING: reconnecting), then `end` and closed')
        t.notOk(ofType(seen, 'end')[0].event instanceof MessageEvent, 'a plain Event: a 204 carries no data')
        t.same((es as unknown as TowerSseClient).state, { kind: 'closed', error: null })
      } else {
        await until('two errors', () => ofType(seen, 'error').length === 2)
        t.equal(ofType(seen, 'error')[1].readyState, Class.CLOSED, 'the second error fires with CLOSED')
      }
      t.equal(es.readyState, Class.CLOSED)
      t.match(ofType(seen, 'progress'), [{ data: '100%', lastEventId: 'prct-100' }])
      await reconnectWindow()
      t.equal(ofType(seen, 'error').length, tower ? 1 : 2, 'nothing after it')
    }
  },
  {
    name: 'an invalid URL throws a SyntaxError DOMException in the constructor',
    from: 'WPT eventsource-constructor-url-bogus; eventsource: throws if `url` is not a string/url',
    run: async (t, { open }) => {
      for (const url of ['http://this is invalid/', 123 as unknown as string, '']) {
        const error = t.throws(() => open(url), `${String(url)} is refused`) as DOMException
        t.ok(error instanceof DOMException, 'a DOMException')
        t.equal(error.name, 'SyntaxError')
      }
    }
  },
  {
    name: 'a non-string url is converted with String() first',
    from: 'WPT eventsource-constructor-stringify',
    differs: { control: 'eventsource@4.1 throws a SyntaxError for anything but a string or URL (it follows Firefox; its own suite says so)' },
    run: async (t, { open, origin, tower }) => {
      const url = { toString: () => `${origin}/welcome` } as unknown as string
      if (tower) {
        const es = open(url)
        t.equal(es.url, `${origin}/welcome`)
        const seen = record(es, ['welcome'])
        await until('welcome', () => seen.length === 1)
      } else {
        t.throws(() => open(url), { name: 'SyntaxError' })
      }
    }
  },
  {
    name: 'redirects (301, 302, 307, 308) on the same origin: url unchanged, origin of the final URL, headers kept',
    from: 'eventsource: redirects: handles 30x to same origin; WPT request-redirect',
    run: async (t, { open, origin }) => {
      for (const status of [301, 302, 307, 308]) {
        const url = `${origin}/redirect?status=${status}`
        const es = open(url, { withCredentials: true, fetch: (target, init) => fetch(target, { ...init, headers: { ...(init?.headers as Record<string, string>), authorization: 'Bearer foo' } }) })
        const seen = record(es, ['message', 'open'])
        await until('two streams', () => ofType(seen, 'message').length >= 2)
        t.equal(es.url, url, `${status}: url stays the one given`)
        const data = JSON.parse(ofType(seen, 'message')[1].data)
        t.match(data, { from: url, auth: 'Bearer foo' }, `${status}: the reconnect follows the redirect again`)
        t.equal(ofType(seen, 'message')[0].origin, origin)
        es.close()
      }
    }
  },
  {
    name: 'a redirect to another origin: origin of the final URL, Authorization dropped',
    from: 'eventsource: redirects: handles 30x to different origin',
    run: async (t, { open, origin, server }) => {
      const es = open(`${origin}/redirect?status=307&cross=1`, { fetch: (target, init) => fetch(target, { ...init, headers: { ...(init?.headers as Record<string, string>), authorization: 'Bearer foo' } }) })
      const seen = record(es, ['message'])
      await until('the message', () => seen.length >= 1)
      t.equal(seen[0].origin, `http://localhost:${server.port}`)
      t.match(JSON.parse(seen[0].data), { host: `localhost:${server.port}`, auth: null })
    }
  },
  {
    name: 'CONNECTING, OPEN and CLOSED on the instance and the class',
    from: 'eventsource: has CONNECTING/OPEN/CLOSED constant; WPT eventsource-prototype',
    run: async (t, { open, origin, Class }) => {
      const es = open(`${origin}/welcome`)
      t.same([es.CONNECTING, es.OPEN, es.CLOSED], [0, 1, 2])
      t.same([Class.CONNECTING, Class.OPEN, Class.CLOSED], [0, 1, 2])
      t.equal(es.readyState, Class.CONNECTING)
      const opened = counter('onOpen')
      es.onopen = opened
      await until('open', () => opened.calls === 1)
      t.equal(es.readyState, es.OPEN)
      es.close()
      t.equal(es.readyState, es.CLOSED)
    }
  },
  {
    name: 'withCredentials: false by default, the option is reflected and given to fetch',
    from: 'eventsource: `withCredentials` option; WPT request-credentials',
    differs: { control: "eventsource@4.1 passes fetch's credentials only where `window` exists; tower-sse/client always does" },
    run: async (t, { open, origin, tower }) => {
      t.equal(open(`${origin}/welcome`).withCredentials, false)
      const inits: RequestInit[] = []
      const es = open(`${origin}/welcome`, { withCredentials: true, fetch: (url, init) => { inits.push(init ?? {}); return fetch(url, init) } })
      t.equal(es.withCredentials, true)
      await until('the request', () => inits.length === 1)
      t.equal(inits[0].credentials, tower ? 'include' : undefined)
    }
  },
  {
    name: 'dispatchEvent reaches listeners (EventTarget)',
    from: 'WPT eventsource-eventtarget',
    run: async (t, { open, origin }) => {
      const es = open(`${origin}/welcome`)
      const seen = record(es, ['message'])
      es.dispatchEvent(new MessageEvent('message', { data: 'data' }))
      t.equal(seen[0]?.data, 'data')
    }
  },
  {
    name: 'one leading BOM is skipped; a second one makes the line unknown',
    from: 'WPT format-bom, format-bom-2',
    run: async (t, { open, origin }) => {
      const first = record(open(raw(origin, '\uFEFFdata: 1\n\n\uFEFFdata: 2\n\ndata: 3\n\n')), ['message'])
      const second = record(open(raw(origin, '\uFEFF\uFEFFdata: 1\n\ndata: 2\n\n')), ['message'])
      await until('the events', () => first.length === 2 && second.length === 1)
      t.same(first.map((s) => s.data), ['1', '3'])
      t.same(second.map((s) => s.data), ['2'])
    }
  },
  {
    name: 'comments are ignored; data lines join with LF',
    from: 'WPT format-comments, format-field-data',
    run: async (t, { open, origin }) => {
      const seen = record(open(raw(origin, ':comment\ndata: 1\n: another\ndata: 2\n\ndata:\n\ndata\ndata\n\ndata:test\n\n')), ['message'])
      await until('four events', () => seen.length === 4)
      t.same(seen.map((s) => s.data), ['1\n2', '', '\n', 'test'])
    }
  },
  {
    name: 'an event without the final blank line is never dispatched',
    from: 'WPT format-data-before-final-empty-line',
    run: async (t, { open, origin }) => {
      const seen = record(open(raw(origin, 'retry: 50\ndata: 1\n\ndata: 2', '&then=end')), ['message', 'error'])
      await until('the end', () => ofType(seen, 'error').length >= 1)
      t.same(seen.slice(0, 2).map((s) => `${s.type}:${s.data ?? ''}`), ['message:1', 'error:undefined'].map((s) => s.replace(':undefined', ':')))
    }
  },
  {
    name: 'event: names the event type; an empty one means message',
    from: 'WPT format-field-event, format-field-event-empty',
    run: async (t, { open, origin }) => {
      const seen = record(open(raw(origin, 'event: test\ndata: x\n\nevent:\ndata: y\n\n')), ['message', 'test'])
      await until('two events', () => seen.length === 2)
      t.same(seen.map((s) => `${s.type}:${s.data}`), ['test:x', 'message:y'])
    }
  },
  {
    name: 'CR, LF and CRLF all end lines; unknown fields are ignored; one space after the colon is dropped',
    from: 'WPT format-newlines, format-field-unknown, format-field-parsing',
    run: async (t, { open, origin }) => {
      const seen = record(open(raw(origin, 'data:test\r\ndata\ndata:test\r\n\rfoo: bar\ndata:  two\n\n')), ['message'])
      await until('two events', () => seen.length === 2)
      t.same(seen.map((s) => s.data), ['test\n\ntest', ' two'])
    }
  },
  {
    name: 'NUL in data is kept; an id containing NUL is ignored',
    from: 'WPT format-null-character, format-field-id-null',
    differs: { control: 'eventsource@4.1 gives each MessageEvent its own id or "" instead of the last event ID string' },
    run: async (t, { open, origin, tower }) => {
      const seen = record(open(raw(origin, 'id: 1\ndata: \0\n\nid: 2\0x\ndata: b\n\n')), ['message'])
      await until('two events', () => seen.length === 2)
      t.same(seen.map((s) => s.data), ['\0', 'b'])
      t.same(seen.map((s) => s.lastEventId), tower ? ['1', '1'] : ['1', ''])
    }
  },
  {
    name: 'lastEventId persists across events, changes with id:, resets with an empty id:',
    from: 'WPT format-field-id-3 (last-event-id2.py)',
    differs: { control: 'eventsource@4.1 gives each MessageEvent its own id or "" instead of the last event ID string' },
    run: async (t, { open, origin, tower }) => {
      const expected = tower
        ? { persists: ['1', '1'], changes: ['1', '2', '2'], resets: ['1', '', ''] }
        : { persists: ['1', ''], changes: ['1', '2', ''], resets: ['1', '', ''] }
      for (const [type, ids] of Object.entries(expected)) {
        const seen = record(open(`${origin}/last-event-id2?type=${type}`), ['message'])
        await until(type, () => seen.length === ids.length)
        t.same(seen.map((s) => s.lastEventId), ids, type)
      }
    }
  },
  {
    name: 'a non-ASCII id is sent back UTF-8 encoded as Last-Event-ID',
    from: 'WPT format-field-id-2 (last-event-id.py)',
    differs: { control: "eventsource@4.1 passes the id to Node's fetch as is, which refuses a header value above U+00FF: it can never reconnect" },
    run: async (t, { open, origin, server, tower }) => {
      const es = open(`${origin}/last-event-id`)
      const seen = record(es, ['message', 'error'])
      if (tower) {
        await until('three events', () => ofType(seen, 'message').length === 3)
        t.same(ofType(seen, 'message').map((s) => [s.data, s.lastEventId]), [['hello', '…'], ['…', '…'], ['…', '…']])
        t.same(server.lastEventIds('/last-event-id').slice(0, 3), ['', '…', '…'], 'the server read the UTF-8 bytes of …')
      } else {
        await until('three failed reconnects', () => ofType(seen, 'error').length >= 3)
        t.same(ofType(seen, 'message').map((s) => s.data), ['hello'], 'no second stream')
      }
    }
  },
  {
    name: 'a block with id: and no data: sets the id sent on the next reconnect',
    from: 'HTML spec, "dispatch the event" step 1 (the last event ID string is set before the empty-data check)',
    differs: { control: 'eventsource@4.1 (through eventsource-parser) drops an id-only block entirely' },
    run: async (t, { open, origin, tower }) => {
      const seen = record(open(`${origin}/id-only`), ['message'])
      await until('the second stream', () => seen.length === 2)
      t.same(seen.map((s) => s.data), ['first', tower ? '2' : '1'])
    }
  },
  {
    name: 'a valid MIME type with parameters opens; another content type fails: error, CLOSED, no retry',
    from: 'WPT format-mime-valid, format-mime-bogus',
    run: async (t, { open, origin, server, Class }) => {
      const valid = record(open(raw(origin, 'data: ok\n\n', `&type=${encodeURIComponent('text/event-stream; charset=utf-8')}`)), ['message'])
      const es = open(`${origin}/status?code=200&type=text/plain&key=mime-${Math.random()}`)
      const seen = record(es, ['error', 'open'])
      await until('the message and the failure', () => valid.length === 1 && seen.length === 1)
      t.same(seen.map((s) => [s.type, s.readyState]), [['error', Class.CLOSED]])
      await reconnectWindow()
      t.equal(seen.length, 1, 'no retry')
      t.ok(server.lastEventIds('/status').length >= 1)
    }
  },
  {
    name: 'HTTP 204, 205, 210, 299, 404 and 410 fail the connection: error, CLOSED, no retry',
    from: 'WPT request-status-error',
    differs: { tower: 'on 204 tower-sse/client fires `end` instead of `error` (the answer is complete), then closes; the other statuses fail alike' },
    run: async (t, { open, origin, tower, Class }) => {
      for (const code of [204, 205, 210, 299, 404, 410]) {
        const es = open(`${origin}/status?code=${code}&type=text/event-stream&key=${code}-${Math.random()}`)
        const seen = record(es, ['error', 'open', 'message', 'end'])
        await until(`${code}: the failure`, () => seen.length >= 1 && es.readyState === Class.CLOSED)
        const expected = tower && code === 204 ? [['end', Class.CONNECTING]] : [['error', Class.CLOSED]]
        t.same(seen.map((s) => [s.type, s.readyState]), expected, `${code}`)
      }
    }
  },
  {
    name: '503 and 429 with Retry-After',
    from: 'WPT request-status-error (503)',
    differs: { tower: 'tower-sse/client waits Retry-After × [1, 1.5] and tries again; EventSource gives up for good' },
    run: async (t, { open, origin, tower, Class }) => {
      for (const code of [503, 429]) {
        const es = open(`${origin}/status?code=${code}&key=${code}-${Math.random()}`)
        const seen = record(es, ['error', 'message'])
        await until(`${code}: the failure`, () => seen.length >= 1)
        if (tower) {
          t.equal(seen[0].readyState, Class.CONNECTING, `${code}: error with CONNECTING: it will try again`)
          t.match((es as unknown as TowerSseClient).state, { kind: 'waiting', reason: 'refused', status: code })
          await until(`${code}: the stream after the refusal`, () => ofType(seen, 'message').length === 1)
        } else {
          t.equal(seen[0].readyState, Class.CLOSED, `${code}: error with CLOSED`)
        }
        es.close()
      }
    }
  },
  {
    name: 'HTTP 500',
    from: 'WPT request-status-error (5xx)',
    differs: { tower: 'tower-sse/client backs off (exponential, full jitter) and tries again; EventSource gives up for good' },
    run: async (t, { open, origin, tower, Class }) => {
      const es = open(`${origin}/status?code=500&key=500-${Math.random()}`)
      const seen = record(es, ['error', 'message'])
      await until('the failure', () => seen.length >= 1)
      t.equal(seen[0].readyState, tower ? Class.CONNECTING : Class.CLOSED)
      if (tower) await until('the stream after the error', () => ofType(seen, 'message').length === 1)
    }
  },
  {
    name: 'retry: sets the reconnection time',
    from: 'WPT format-field-retry',
    differs: { tower: 'tower-sse/client waits retry: × [1, 1.2] (jitter), never under minRetryMs' },
    run: async (t, { open, origin, tower }) => {
      const es = open(raw(origin, 'retry: 100\ndata: x\n\n', '&then=end'))
      const seen = record(es, ['open', 'error'])
      const states: TowerSseClientState[] = []
      if (tower) es.addEventListener('statechange', () => states.push((es as unknown as TowerSseClient).state))
      await until('a second open', () => ofType(seen, 'open').length >= 2)
      if (tower) {
        const wait = states.find((s) => s.kind === 'waiting')
        t.ok(wait?.kind === 'waiting' && wait.delayMs >= 100 && wait.delayMs <= 120, `waited ${wait?.kind === 'waiting' ? wait.delayMs : '?'} ms for retry: 100`)
      } else {
        t.pass('reconnected after retry: 100')
      }
    }
  },
  {
    name: 'a 200 event stream with a body-less Response (custom fetch) is a normal end too',
    from: 'eventsource: throws on `fetch()` that does not return a body',
    differs: { control: 'eventsource@4.1 fails the connection (CLOSED) on a Response without a body: its own extension' },
    run: async (t, { open, origin, tower, Class }) => {
      let requests = 0
      const es = open(`${origin}/empty`, { fetch: async () => { requests++; return new Response(null, { headers: { 'content-type': 'text/event-stream' } }) } })
      const seen = record(es, ['open', 'error'])
      const statesAtError: unknown[] = []
      es.addEventListener('error', () => statesAtError.push((es as unknown as TowerSseClient).state))
      await until('the end', () => ofType(seen, 'error').length >= 1)
      t.same(seen.slice(0, 2).map((s) => s.type), ['open', 'error'])
      if (tower) {
        t.equal(ofType(seen, 'error')[0].readyState, Class.CONNECTING)
        t.match(statesAtError[0], { kind: 'waiting', reason: 'stream-ended', failures: 0 }, 'an end, not a network error')
        await until('the reconnect', () => requests >= 2)
      } else {
        t.equal(es.readyState, Class.CLOSED)
      }
    }
  },
  {
    name: 'a 200 event stream with an empty body is a normal end: open, error with CONNECTING, reconnect',
    from: 'HTML spec: a stream that ends reestablishes the connection',
    run: async (t, { open, origin, server, Class, tower }) => {
      const before = server.lastEventIds('/empty').length
      const es = open(`${origin}/empty`)
      const seen = record(es, ['open', 'error'])
      await until('the end', () => ofType(seen, 'error').length >= 1)
      t.same(seen.slice(0, 2).map((s) => [s.type, s.readyState]), [['open', Class.OPEN], ['error', Class.CONNECTING]])
      // The control's default reconnection time is 3 s: only the tower-sse client (retryMs 50 here) is waited for.
      if (tower) await until('the reconnect', () => server.lastEventIds('/empty').length - before >= 2)
      t.not(es.readyState, Class.CLOSED)
    }
  },
  {
    name: 'nothing listening: error with CONNECTING, and it keeps trying',
    from: 'HTML spec: a network error reestablishes the connection',
    run: async (t, { open, Class }) => {
      const es = open('http://127.0.0.1:9/nothing-here')
      const seen = record(es, ['error', 'open'])
      await until('the error', () => seen.length >= 1)
      t.same([seen[0].type, seen[0].readyState], ['error', Class.CONNECTING])
      t.same(ofType(seen, 'open'), [], 'never open')
    }
  },
  {
    name: 'a named `end`, the plugin\'s own `event: error` and an app\'s `error` event',
    from: 'HTML spec: an event with a type is dispatched by that name; a stream that ends reestablishes the connection',
    differs: {
      tower: 'tower-sse/client closes for good after `end` (no error) and after an `error` whose data is {"code":"TOWER_SSE_…"} (then its fatal error); ' +
        'EventSource dispatches them like any named event and reconnects when the stream ends, asking a per-request answer again'
    },
    run: async (t, { open, origin, server, tower, Class }) => {
      const requests = (): number => server.lastEventIds('/raw').length
      const isMessage = (s: Seen): boolean => s.event instanceof MessageEvent
      let before = requests()
      const ended = open(raw(origin, 'retry: 50\ndata: 1\n\nevent: end\ndata: {}\n\n', '&then=end'))
      const endSeen = record(ended, ['message', 'end', 'error'])
      await until('the end', () => tower ? ended.readyState === Class.CLOSED : ofType(endSeen, 'error').length >= 1)
      t.same(endSeen.slice(0, 2).map((s) => [s.type, s.data, s.readyState]), [['message', '1', Class.OPEN], ['end', '{}', Class.OPEN]], 'both dispatch `end` as a named event')
      await reconnectWindow()
      if (tower) {
        t.same(endSeen.length, 2, 'then closed: no error')
        t.equal(requests() - before, 1, 'no reconnect')
      } else {
        t.ok(requests() - before >= 2, 'the control reconnects')
      }
      ended.close()

      before = requests()
      const failed = open(raw(origin, 'retry: 50\nevent: error\ndata: {"code":"TOWER_SSE_STREAM_FAILED"}\n\n', '&then=end'))
      const failSeen = record(failed, ['error'])
      await until('the failure', () => failSeen.length >= 2)
      t.same(failSeen.slice(0, 2).map((s) => [isMessage(s), s.readyState]), [[true, Class.OPEN], [false, tower ? Class.CLOSED : Class.CONNECTING]],
        'the server\'s error as a MessageEvent, then the client\'s own')
      t.equal(failSeen[0].data, '{"code":"TOWER_SSE_STREAM_FAILED"}')
      if (tower) t.match(failSeen[1].event, { code: 'TOWER_SSE_CLIENT_SERVER_ERROR', serverCode: 'TOWER_SSE_STREAM_FAILED', fatal: true })
      await reconnectWindow()
      if (tower) t.equal(requests() - before, 1, 'no reconnect')
      failed.close()

      const app = open(raw(origin, 'event: error\ndata: {"code":"E_APP"}\n\ndata: 2\n\n'))
      const appSeen = record(app, ['error', 'message'])
      await until('the message after it', () => ofType(appSeen, 'message').length === 1)
      t.same(appSeen.map((s) => [s.type, isMessage(s), s.data, s.readyState]), [['error', true, '{"code":"E_APP"}', Class.OPEN], ['message', true, '2', Class.OPEN]],
        'an app\'s `error` event is a named event: the stream goes on')
    }
  },
  {
    name: 'close() right after the constructor: CLOSED, no event',
    from: 'WPT eventsource-request-cancellation',
    run: async (t, { open, origin, Class }) => {
      const es = open(`${origin}/welcome`)
      const seen = record(es, ['open', 'welcome', 'error'])
      es.close()
      t.equal(es.readyState, Class.CLOSED)
      await reconnectWindow()
      t.same(seen, [])
    }
  }
]

// Timing options only: a reconnect in milliseconds rather than seconds keeps the suite fast.
const TOWER_TIMINGS = { retryMs: 50, minRetryMs: 0, backoffBaseMs: 50, backoffCapMs: 100, retryAfterJitterRatio: 0 }

const OPENERS: Record<Kind, Pick<Env, 'open' | 'Class' | 'tower'>> = {
  'tower-sse/client': {
    tower: true,
    Class: TowerSseClient,
    open: (url, init) => new TowerSseClient(url, { ...TOWER_TIMINGS, ...init }) as unknown as Source
  },
  eventsource: {
    tower: false,
    Class: EventSource,
    open: (url, init) => new EventSource(url, init) as unknown as Source
  }
}

t.test('EventSource conformance: the same cases against tower-sse/client and the eventsource package', async (t) => {
  // The two clients side by side, each case after case against a server of its own (the cases
  // read what the server saw per path): most of a case is waiting for a reconnect.
  t.jobs = 2
  const passed: Record<Kind, number> = { 'tower-sse/client': 0, eventsource: 0 }
  await Promise.all((Object.keys(OPENERS) as Kind[]).map(async (kind) => {
    const server = await startConformanceServer()
    t.teardown(() => server.close())
    for (const kase of CASES) {
      const mark = kase.differs?.tower !== undefined ? ' [deliberate difference]' : kase.differs?.control !== undefined && kind === 'eventsource' ? ' [control departs from the spec]' : ''
      await t.test(`${kind}: ${kase.name}${mark}`, async (t) => {
        const opened: Source[] = []
        const { open, ...rest } = OPENERS[kind]
        t.teardown(() => { for (const es of opened) es.close() })
        const env: Env = {
          ...rest,
          kind,
          server,
          origin: server.origin,
          open: (url, init) => {
            const es = open(url, init)
            opened.push(es)
            return es
          }
        }
        await kase.run(t, env)
        if (t.passing()) passed[kind]++
      })
    }
  }))
  t.comment(`cases: ${CASES.length}; passed: tower-sse/client ${passed['tower-sse/client']}, eventsource ${passed.eventsource}; ` +
    `deliberate differences ${CASES.filter((c) => c.differs?.tower !== undefined).length}, control departures ${CASES.filter((c) => c.differs?.control !== undefined).length}`)
  t.equal(passed['tower-sse/client'], CASES.length, 'tower-sse/client passes every case')
  t.equal(passed.eventsource, CASES.length, 'the control passes every case (its departures asserted as they are)')
})
