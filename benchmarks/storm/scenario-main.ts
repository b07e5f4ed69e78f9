/**
 * Runs scenarios for a runner in another process (inside a private network namespace for the
 * narrowed-port runs): answers `run` with the scenario's result.
 */
import { serveIpc } from '../lib/ipc'
import { runScenario, type ScenarioSpec } from './scenario'

serveIpc('scenario-main', {
  run: async (request) => await runScenario(request.spec as ScenarioSpec)
})
