import towerSse from '../../../lib'
import { connectedEvent, EVENTS_PATH, type ServerSetup } from './contract'

/** The plugin under test, registered with the variant's JSON options (and Tower's first event). */
export const setupTowerSse: ServerSetup = async (app, options) => {
  if ('path' in options) throw new Error(`tower-sse server: option "path" is fixed at ${EVENTS_PATH} in the storm benchmark`)
  await app.register(towerSse, {
    ...options,
    path: EVENTS_PATH,
    initialEvent: (client) => ({ data: connectedEvent(client.id) })
  })
  return () => {
    const stats = app.sse.stats()
    return { admitted: stats.accepted, rejected: stats.rejected, evicted: 0, expired: stats.expired, open: stats.current }
  }
}
