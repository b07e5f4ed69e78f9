import { createRequire } from 'node:module'
import type FindMyWayRouter from 'find-my-way'

/**
 * Fastify's own router, find-my-way, loaded from fastify's dependencies rather than depended on:
 * Tower asks it whether a stream path clashes with or shadows its routes, by the rules of the very
 * version Fastify runs, and a plugin user installs nothing for Tower. (Should fastify stop
 * depending on it, every Tower start and test fails here, loudly.)
 */
export const FindMyWay = createRequire(require.resolve('fastify'))('find-my-way') as typeof FindMyWayRouter
