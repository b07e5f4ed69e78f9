/* eslint-disable no-template-curly-in-string -- a mutant's text is TypeScript source, its template literals included */
/**
 * The mutants scripts/mutate.mjs applies, one at a time: `find` (exact text, once in `file`) is
 * replaced by `replace`, and `tests` must then fail. `why` says what the mutant breaks; a mutant
 * marked `equivalent` (with the reason) cannot change behaviour and is listed, not run.
 */
export const MUTANTS = [
  // The 13 survivors of issue 32's audit (lib/bus, the heartbeat, the subscriber, the client, Tower).
  {
    id: 'redis-epoch-continuity',
    file: 'lib/bus/redis/continuity.ts',
    find: 'previous.seq === this.lastSeq',
    replace: 'previous.seq >= this.lastSeq',
    why: 'an instance behind when Redis restarts treats the new epoch as continuous: silent loss',
    tests: ['test/continuity.test.ts', 'test/bus-continuity.test.ts']
  },
  {
    id: 'redis-restart-every-end',
    file: 'lib/bus/redis/connection.ts',
    find: "connection.on('end', onEnd)",
    replace: "connection.once('end', onEnd)",
    why: 'a connection that ends a second time is never started again',
    tests: ['test/bus-redis.test.ts']
  },
  {
    id: 'sweep-heartbeat-handle',
    file: 'lib/streams/sweep.ts',
    find: '() => { this.cancelBeat = null })',
    replace: '() => {})',
    why: 'above one slice of streams, heartbeats stop after the first sliced pass',
    tests: ['test/heartbeat-sweep.test.ts']
  },
  {
    id: 'redis-deadline-offset',
    file: 'lib/bus/redis/server-facts.ts',
    find: 'return localMs + this.offsetMs - this.uncertaintyMs',
    replace: 'return localMs - this.uncertaintyMs',
    why: 'the publish deadline is sent in local time, not Redis\'s',
    tests: ['test/bus-clock-offset.test.ts']
  },
  {
    id: 'client-retry-after-zero',
    file: 'lib/client/wire.ts',
    find: 'retryAfterMs !== null && retryAfterMs > 0',
    replace: 'retryAfterMs !== null && retryAfterMs >= 0',
    why: 'Retry-After: 0 or a past date reconnects at once, without backoff',
    tests: ['test/client.test.ts']
  },
  {
    id: 'redis-idempotency-ttl',
    file: 'lib/bus/redis/redis-bus.ts',
    find: 'this.maxLength, deadline, keep, this.options.idempotencyWindowMs,',
    replace: 'this.maxLength, deadline, keep, this.options.idempotencyWindowMs * 1000,',
    why: 'idempotency keys outlive their window',
    tests: ['test/bus-redis.test.ts']
  },
  {
    id: 'redis-evictable-policies',
    file: 'lib/bus/redis/server-facts.ts',
    find: "policy?.startsWith('allkeys-') === true",
    replace: "policy === 'allkeys-lru'",
    why: 'allkeys-lfu and allkeys-random are accepted, and evict the bus\'s keys',
    tests: ['test/bus-gray.test.ts']
  },
  {
    id: 'sweep-heartbeat-slice',
    file: 'lib/streams/sweep.ts',
    find: 'const HEARTBEAT_SLICE = 500',
    replace: 'const HEARTBEAT_SLICE = 500 * 1000',
    why: 'the whole sweep in one turn: the event-loop stall at many streams returns',
    tests: ['test/heartbeat-sweep.test.ts']
  },
  {
    id: 'subscriber-stall-reset',
    file: 'lib/streams/subscriber.ts',
    find: '    this.stalledBeats = 0\n    this.write(frame)',
    replace: '    this.write(frame)',
    why: 'a reader that stalls now and then is swept early',
    tests: ['test/slow-client.test.ts']
  },
  {
    id: 'redis-rollback-check',
    file: 'lib/bus/redis/continuity.ts',
    find: 'return this.rolledBack || seq < this.lastSeq || tail === undefined || compareStreamIds(tail, this.readCursor) < 0',
    replace: 'return this.rolledBack',
    why: 'a rollback is seen only when a later publish lands; on an idle instance never',
    tests: ['test/continuity.test.ts', 'test/bus-continuity.test.ts']
  },
  {
    id: 'tower-trust-proxy-full-prefix',
    file: 'lib/tower/address-ranges.ts',
    find: 'Number(prefix) <= bits',
    replace: 'Number(prefix) < bits',
    why: '/32 and /128 (one address) are refused',
    tests: ['test/tower-config.test.ts']
  },
  {
    id: 'subscriber-budget-inclusive',
    file: 'lib/streams/subscriber.ts',
    find: 'this.queue.bytes + this.sink.writableLength + bytes <= this.context.maxBufferedBytes',
    replace: 'this.queue.bytes + this.sink.writableLength + bytes < this.context.maxBufferedBytes',
    why: 'a frame that fills the budget exactly drops the stream',
    tests: ['test/slow-client.test.ts']
  },
  {
    id: 'tower-bearer-trailing-junk',
    file: 'lib/tower/request-guard.ts',
    find: '/^bearer +(\\S+) *$/i',
    replace: '/^bearer +(\\S+)/i',
    why: '"Bearer <token> junk" is accepted',
    tests: ['test/tower-guard.test.ts']
  },
  // lib/admission, the registry and lib/bus beyond the audit's survivors.
  {
    id: 'admission-token-below-one',
    file: 'lib/admission/token-bucket.ts',
    find: 'if (this.tokens < 1 - ROUNDING) return false',
    replace: 'if (this.tokens <= 1) return false',
    why: 'the last whole token of the burst is refused',
    tests: ['test/token-bucket.test.ts']
  },
  {
    id: 'admission-token-rounding',
    file: 'lib/admission/token-bucket.ts',
    find: 'if (this.tokens < 1 - ROUNDING) return false',
    replace: 'if (this.tokens < 1) return false',
    why: 'a second on a fractional monotonic clock refills 0.9999999999999996 of a token, and it is refused',
    tests: ['test/token-bucket.test.ts']
  },
  {
    id: 'admission-token-burst-cap',
    file: 'lib/admission/token-bucket.ts',
    find: 'Math.min(this.burst, this.tokens +',
    replace: 'Math.max(this.burst, this.tokens +',
    why: 'an idle bucket fills beyond its burst',
    tests: ['test/token-bucket.test.ts']
  },
  {
    id: 'admission-token-retry-floor',
    file: 'lib/admission/token-bucket.ts',
    find: 'Math.max(1, Math.ceil(',
    replace: 'Math.max(0, Math.ceil(',
    why: 'Retry-After 0 while a token is still refilling',
    tests: ['test/token-bucket.test.ts']
  },
  {
    id: 'admission-tarpit-capacity',
    file: 'lib/admission/tarpit.ts',
    find: 'if (this.held.size >= this.capacity) return false',
    replace: 'if (this.held.size > this.capacity) return false',
    why: 'the tarpit holds one refusal more than its bound',
    tests: ['test/tarpit.test.ts']
  },
  {
    id: 'admission-storm-threshold',
    file: 'lib/admission/storm-meter.ts',
    find: 'return this.level > 0 || this.refusalsThisSecond > this.thresholdPerSecond',
    replace: 'return this.level > 0 || this.refusalsThisSecond >= this.thresholdPerSecond',
    why: 'a storm at exactly the threshold, not above it',
    tests: ['test/storm-meter.test.ts']
  },
  {
    id: 'admission-storm-scale',
    file: 'lib/admission/storm-meter.ts',
    find: 'return 2 ** this.level',
    replace: 'return 2 * this.level',
    why: 'the storm widens linearly (and level 0 is scale 0)',
    tests: ['test/storm-meter.test.ts']
  },
  {
    id: 'admission-per-key-bound',
    file: 'lib/admission/admission.ts',
    find: 'this.streams.countForKey(key) >= this.options.maxClientsPerKey',
    replace: 'this.streams.countForKey(key) > this.options.maxClientsPerKey',
    why: 'one stream more than maxClientsPerKey',
    tests: ['test/shed-load.test.ts']
  },
  {
    id: 'admission-closing-refused',
    file: 'lib/admission/admission.ts',
    find: "if (this.closing) return 'closing'\n",
    replace: '',
    why: 'streams still open during shutdown',
    tests: ['test/shutdown.test.ts']
  },
  {
    id: 'admission-retry-after-cap',
    file: 'lib/admission/admission.ts',
    find: 'Math.min(window + Math.floor(this.clocks.random() * (window + 1)), max)',
    replace: 'window + Math.floor(this.clocks.random() * (window + 1))',
    why: 'Retry-After above maxRetryAfterSeconds',
    tests: ['test/shed-load.test.ts']
  },
  {
    id: 'admission-pipelined-bound',
    file: 'lib/admission/admission.ts',
    find: 'if (behind + 1 >= MAX_PIPELINED_BEHIND_STREAM) socket.destroy()',
    replace: 'if (behind + 1 > MAX_PIPELINED_BEHIND_STREAM) socket.destroy()',
    why: 'one request more piled up behind a stream',
    tests: ['test/pipelining.test.ts']
  },
  {
    id: 'fanout-lost-survivors',
    file: 'lib/streams/fan-out.ts',
    find: 'if (!subscriber.broadcasts || this.resumes.survives(subscriber, at.position)) continue',
    replace: 'if (!subscriber.broadcasts) continue',
    why: 'a discontinuity resyncs a waiting client to an older id',
    tests: ['test/bus-continuity.test.ts']
  },
  {
    id: 'fanout-topic-filter',
    file: 'lib/streams/fan-out.ts',
    find: 'if (subscriber.wants(topic) && subscriber.write(frame)) delivered++',
    replace: 'if (subscriber.write(frame)) delivered++',
    why: 'every stream gets every topic',
    tests: ['test/bus-redis.test.ts']
  },
  {
    id: 'registry-full-throws',
    file: 'lib/streams/registry.ts',
    find: '    if (!this.hasRoom) throw new RegistryFullError()\n',
    replace: '',
    why: 'the registry holds more than its capacity',
    tests: ['test/errors.test.ts', 'test/admission.test.ts']
  },
  {
    id: 'redis-read-hole',
    file: 'lib/bus/redis/continuity.ts',
    find: "if (Number(fieldOf(fields, 'n')) !== ++seq) return { kind: 'gone', reason: 'lost' }",
    replace: '++seq',
    why: 'a resume read across a deleted entry replays the survivors',
    tests: ['test/bus-redis.test.ts', 'test/bus-gray.test.ts', 'test/bus-loss.test.ts', 'test/bus-continuity.test.ts']
  },
  {
    id: 'redis-reader-hole',
    file: 'lib/bus/redis/continuity.ts',
    find: 'const gap = place.seq !== this.lastSeq + 1',
    replace: 'const gap = false',
    why: 'the reader skips a trimmed hole silently',
    tests: ['test/continuity.test.ts', 'test/bus-redis.test.ts', 'test/bus-gray.test.ts', 'test/bus-loss.test.ts', 'test/bus-continuity.test.ts']
  },
  {
    id: 'redis-script-deadline',
    file: 'lib/bus/redis/script.ts',
    find: "if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > deadline then return { 'late' } end",
    replace: '',
    why: 'a publish that waited out its deadline lands late',
    tests: ['test/bus-redis.test.ts', 'test/bus-gray.test.ts', 'test/bus-loss.test.ts', 'test/bus-continuity.test.ts']
  },
  {
    id: 'redis-script-lossless',
    file: 'lib/bus/redis/script.ts',
    find: "if ARGV[4] == '1' then",
    replace: "if ARGV[4] == '0' then",
    why: 'a lossless restart resyncs, a lossy one does not',
    tests: ['test/bus-redis.test.ts', 'test/bus-gray.test.ts', 'test/bus-loss.test.ts', 'test/bus-continuity.test.ts']
  },
  {
    id: 'redis-script-dup',
    file: 'lib/bus/redis/script.ts',
    find: "      return { 'dup', string.sub(prior, space + 1) }\n",
    replace: '',
    why: 'a retry with the same idempotency key publishes again',
    tests: ['test/bus-redis.test.ts', 'test/bus-gray.test.ts', 'test/bus-loss.test.ts', 'test/bus-continuity.test.ts']
  },
  {
    id: 'redis-pending-bound',
    file: 'lib/bus/redis/redis-bus.ts',
    find: 'if (this.waiters.size >= this.options.maxPendingPublishes)',
    replace: 'if (this.waiters.size > this.options.maxPendingPublishes)',
    why: 'one publish more in flight than the bound',
    tests: ['test/bus-redis.test.ts', 'test/bus-gray.test.ts', 'test/bus-loss.test.ts', 'test/bus-continuity.test.ts']
  },
  {
    id: 'redis-behind-epoch',
    file: 'lib/bus/redis/redis-bus.ts',
    find: "current === epoch ? { kind: 'behind' } : { kind: 'gone', reason: 'unknown' }",
    replace: "{ kind: 'gone', reason: 'unknown' }",
    why: 'a lagging instance resyncs a client to an older id',
    tests: ['test/bus-redis.test.ts', 'test/bus-gray.test.ts', 'test/bus-loss.test.ts', 'test/bus-continuity.test.ts']
  },
  {
    id: 'redis-single-flight',
    file: 'lib/shared/single-flight.ts',
    find: 'if (running !== undefined) return running',
    replace: '',
    why: 'every resume of a reconnect wave reads Redis',
    tests: ['test/bus-resume-mutants.test.ts']
  },
  {
    id: 'memory-idempotency-window',
    file: 'lib/bus/memory.ts',
    find: 'const since = this.now() - this.idempotencyWindowMs',
    replace: 'const since = this.now() + this.idempotencyWindowMs',
    why: 'the memory bus forgets idempotency keys at once',
    tests: ['test/bus-memory.test.ts']
  },
  {
    id: 'redis-read-entry-epoch',
    file: 'lib/bus/redis/continuity.ts',
    find: "if (fieldOf(first[1], 'e') !== after.epoch) return { kind: 'gone', reason: 'unknown' }",
    replace: '',
    why: 'equivalent',
    equivalent: "an entry of another epoch at the client's exact stream id needs the stream recreated within the same millisecond and sequence: the check guards it, no test can make it happen",
    tests: []
  },
  {
    id: 'registry-per-key-zero',
    file: 'lib/streams/registry.ts',
    find: '    if (tabs?.size === 0) this.byKey.delete(subscriber.key)\n',
    replace: '',
    why: 'equivalent',
    equivalent: 'a key whose last stream closed keeps an empty set instead of being deleted: countForKey answers 0 and send/close({ key }) address no stream either way (memory only)',
    tests: []
  },
  {
    id: 'redis-restart-ended-only',
    file: 'lib/bus/redis/connection.ts',
    find: "if (!stopped && connection.status === 'end')",
    replace: 'if (!stopped)',
    why: 'equivalent',
    equivalent: 'connect() on a connection that is not ended rejects (already connecting/connected) and the rejection is ignored',
    tests: []
  },
  // Issue 44: the survivors of an independent audit (nine no test saw, two seen only by a whole-suite
  // run or tap's timeout), each with the test file that must now see it.
  {
    id: 'registry-send-counts-refused',
    file: 'lib/streams/registry.ts',
    find: 'for (const subscriber of this.addressed(to)) if (subscriber.write(frame)) sent++',
    replace: 'for (const subscriber of this.addressed(to)) { subscriber.write(frame); sent++ }',
    why: 'send() counts a stream whose write was refused (dropped as too slow) as a delivery',
    tests: ['test/addressable.test.ts']
  },
  {
    id: 'broadcast-scope-in-clear',
    file: 'lib/streams/broadcast.ts',
    find: 'scope === undefined ? key : `${sha256Hex(scope)}#${key}`',
    replace: 'scope === undefined ? key : `${scope}#${key}`',
    why: 'an idempotencyScope (a credential, say) is stored in clear in Redis key names',
    tests: ['test/bus-redis.test.ts']
  },
  {
    id: 'redis-proof-restart',
    file: 'lib/bus/redis/receive-proof.ts',
    find: '  restart (): void {\n    this.provenAt = this.clock()\n  }',
    replace: '  restart (): void {}',
    why: 'after an out-of-memory spell the receive deadline is not restarted: a spurious down/up, or a deaf close as Redis recovers',
    tests: ['test/bus-watch.test.ts', 'test/bus-oom.test.ts']
  },
  {
    id: 'redis-spell-end-restart',
    file: 'lib/bus/redis/redis-bus.ts',
    find: '    if (this.memory.active) this.proof.restart()\n',
    replace: '',
    why: 'the write that ends an out-of-memory spell leaves the receive deadline where the spell found it: down, then every stream closed as deaf',
    tests: ['test/bus-oom.test.ts']
  },
  {
    id: 'redis-probe-cadence',
    file: 'lib/bus/redis/receive-proof.ts',
    find: 'this.silentMs() > PROBE_EVERY_MS ? PROBE_AGAIN_MS : PROBE_EVERY_MS',
    replace: 'this.silentMs() > PROBE_EVERY_MS ? PROBE_EVERY_MS : PROBE_AGAIN_MS',
    why: 'probes slow while unseen and fast while fine: a healed connection proves it receives only after 1 s',
    tests: ['test/bus-watch.test.ts']
  },
  {
    id: 'redis-probe-one-in-flight',
    file: 'lib/bus/redis/receive-proof.ts',
    find: 'if (this.inFlight || now - this.sentAt < every) return',
    replace: 'if (now - this.sentAt < every) return',
    why: 'probes pile up on a connection that does not answer',
    tests: ['test/bus-watch.test.ts']
  },
  {
    id: 'redis-deaf-once-per-spell',
    file: 'lib/bus/redis/watchdog.ts',
    find: ' || this.clocks.monotonic() - this.deafClosedAt < spell',
    replace: '',
    why: 'the deaf warning and close pass repeat every 250 ms through a long spell',
    tests: ['test/bus-watch.test.ts']
  },
  {
    id: 'redis-range-max-events',
    file: 'lib/bus/redis/continuity.ts',
    find: 'if (events.length > maxEvents)',
    replace: 'if (events.length >= maxEvents)',
    why: 'a resume that missed exactly history.events events gets a resync instead of its replay',
    tests: ['test/continuity.test.ts']
  },
  {
    id: 'redis-range-reached',
    file: 'lib/bus/redis/continuity.ts',
    find: "  if (upTo.epoch === after.epoch && reached !== formatEventId(upTo)) return { kind: 'gone', reason: 'lost' }\n",
    replace: '',
    why: 'a resume read that stops short of the newest event delivered here replays part of what was missed, silently',
    tests: ['test/continuity.test.ts']
  },
  {
    id: 'client-get-body-case',
    file: 'lib/client/options.ts',
    find: "if (method.toUpperCase() === 'GET') throw",
    replace: "if (method === 'GET') throw",
    why: "method 'get' with a body passes construction, then every attempt fails in fetch and the client retries forever",
    tests: ['test/client-request.test.ts']
  },
  {
    id: 'client-accept-kept',
    file: 'lib/client/wire.ts',
    find: "if (!request.has('accept')) request.set('accept', 'text/event-stream')",
    replace: "request.set('accept', 'text/event-stream')",
    why: "the client overwrites the app's own Accept header",
    tests: ['test/client-request.test.ts']
  },
  {
    id: 'client-onresponse-retry-release',
    file: 'lib/client/wire.ts',
    find: '    if (decision === undefined) return true\n    await letGo(response)\n',
    replace: '    if (decision === undefined) return true\n',
    why: "a response onResponse retries is never released: its connection (a stream's, never ending) is held until garbage collection",
    tests: ['test/client-request.test.ts']
  },
  {
    id: 'registry-remove-by-key',
    file: 'lib/streams/registry.ts',
    find: '    tabs?.delete(subscriber)\n',
    replace: '',
    why: "a closed stream stays under its key: its key's slot is never given back (maxClientsPerKey), close({ key }) counts it",
    tests: ['test/admission.test.ts', 'test/addressable.test.ts']
  },
  {
    id: 'registry-add-by-key',
    file: 'lib/streams/registry.ts',
    find: '    else tabs.add(subscriber)\n',
    replace: '',
    why: "a key's second stream is not under its key: send/close({ key }) miss it, maxClientsPerKey does not count it",
    tests: ['test/addressable.test.ts']
  },
  {
    id: 'registry-closed-counted',
    file: 'lib/streams/registry.ts',
    find: '    this.stats.closed(reason, subscriber.bytesQueued)\n',
    replace: '',
    why: 'a stream that ends is never counted by how it ended (stats, the log line, the metrics)',
    tests: ['test/admission.test.ts']
  },
  {
    id: 'registry-close-reason',
    file: 'lib/streams/registry.ts',
    find: '    if (!(APP_CLOSE_REASONS as readonly unknown[]).includes(reason)) throw',
    replace: '    if (false) throw',
    why: "close() takes any reason: an app's close is counted as an expiry or a shutdown",
    tests: ['test/addressable.test.ts']
  },
  {
    id: 'per-request-return',
    file: 'lib/route/per-request.ts',
    find: 'stopOf(iterable)?.call(iterable) ?? iterator.return?.()',
    replace: 'stopOf(iterable)?.call(iterable)',
    why: "a per-request stream's iterator is never returned when its stream ends: the app's finally never runs",
    tests: ['test/per-request-stream.test.ts']
  },
  // The handle of a stream (reply.eventStream.subscribe()'s answer).
  {
    id: 'handle-end-frame',
    file: 'lib/route/stream-handle.ts',
    find: '    this.subscriber.write(END_FRAME)\n    this.subscriber.end(\'ended\')',
    replace: '    this.subscriber.end(\'ended\')',
    why: 'handle.end() closes without `event: end`: the client reconnects instead of stopping',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'handle-close-reason',
    file: 'lib/route/stream-handle.ts',
    find: "fn(subscriber.endReason ?? 'disconnected')",
    replace: "fn('disconnected')",
    why: 'onClose is told every end was the client leaving',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'handle-signal-reason',
    file: 'lib/route/stream-handle.ts',
    find: 'this.onClose((reason) => controller.abort(reason))',
    replace: 'this.onClose(() => controller.abort())',
    why: "the signal's reason is no StreamEnd",
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'handle-not-opened-signal',
    file: 'lib/route/stream-handle.ts',
    find: "signal: AbortSignal.abort('notOpened'),",
    replace: 'signal: new AbortController().signal,',
    why: 'a refused stream\'s signal never aborts: work tied to it runs on',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'handle-is-open',
    file: 'lib/route/stream-handle.ts',
    find: 'return !this.subscriber.isOver',
    replace: 'return true',
    why: 'isOpen stays true after the stream ended',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'handle-send-result',
    file: 'lib/route/stream-handle.ts',
    find: 'return this.subscriber.write(encodeAppEvent(event))',
    replace: 'this.subscriber.write(encodeAppEvent(event))\n    return true',
    why: 'send() says an event was written to a stream that had ended',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'handle-end-once',
    file: 'lib/route/stream-handle.ts',
    find: '    if (this.subscriber.isOver) return\n    this.subscriber.write(END_FRAME)',
    replace: '    this.subscriber.write(END_FRAME)',
    why: 'equivalent',
    equivalent: "on a stream that is over, the subscriber's write() and end() do nothing (write returns false, end returns at once): the guard only saves the calls",
    tests: []
  },
  // Per-request streams: the pump, and the release of an iterable whose stream never opened.
  {
    id: 'per-request-release-return',
    file: 'lib/route/per-request.ts',
    find: 'stopOf(source)?.call(source) ?? source[Symbol.asyncIterator]().return?.()',
    replace: 'stopOf(source)?.call(source)',
    why: 'an iterable whose stream never opened is never returned (a cursor, a subscription held)',
    tests: ['test/per-request-trust.test.ts', 'test/forgotten-return.test.ts']
  },
  {
    id: 'per-request-release-destroy',
    file: 'lib/route/per-request.ts',
    find: 'stopOf(source)?.call(source) ?? source[Symbol.asyncIterator]().return?.()',
    replace: 'source[Symbol.asyncIterator]().return?.()',
    why: 'a Readable whose stream never opened is not destroyed: the return() of an iterator never started does nothing to it',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'per-request-keep-open',
    file: 'lib/route/per-request.ts',
    find: 'if (!keepOpen) {',
    replace: 'if (keepOpen) {',
    why: 'keepOpen ends the stream, and a stream without it stays open after its answer',
    tests: ['test/per-request-stream.test.ts']
  },
  {
    id: 'per-request-item-budget',
    file: 'lib/route/per-request.ts',
    find: 'if (frame.length > budget) {',
    replace: 'if (frame.length >= budget) {',
    why: 'an item that fills the byte budget exactly is refused as too large',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'per-request-half-budget',
    file: 'lib/route/per-request.ts',
    find: 'whenFits(frame.length, budget / 2)',
    replace: 'whenFits(frame.length)',
    why: 'the pump fills the whole budget: a broadcast to a reader that keeps up drops it',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'per-request-guard-rejection',
    file: 'lib/route/per-request.ts',
    find: "if (typeof (result as PromiseLike<unknown> | undefined)?.then === 'function') Promise.resolve(result).catch(failed)",
    replace: '',
    why: 'a return() that rejects is an unhandled rejection: it ends the process',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'per-request-error-frame',
    file: 'lib/route/per-request.ts',
    find: "    subscriber.write(frame)\n    subscriber.end('streamFailed')",
    replace: "    subscriber.end('streamFailed')",
    why: 'a failed per-request stream closes without telling its client why',
    tests: ['test/per-request-stream.test.ts']
  },
  {
    id: 'per-request-fail-room',
    file: 'lib/route/per-request.ts',
    find: '    if (!await subscriber.whenFits(frame.length)) return\n',
    replace: '',
    why: 'a failure told while the last item still fills the budget drops the stream as too slow: no error event, no retry:',
    tests: ['test/per-request-trust.test.ts']
  },
  // Opening a stream: every path on which it does not open releases the iterable it was given.
  {
    id: 'open-release-failed',
    file: 'lib/route/open.ts',
    find: '      this.pending.delete(request)\n      release(source, request.log)\n',
    replace: '      this.pending.delete(request)\n',
    why: 'an opening that failed keeps its iterable',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'open-release-head',
    file: 'lib/route/open.ts',
    find: '      endAndClose(reply.raw)\n      release(source, request.log)\n',
    replace: '      endAndClose(reply.raw)\n',
    why: 'a HEAD request keeps its iterable',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'open-release-no-stream',
    file: 'lib/route/open.ts',
    find: '      // none for this client to see (404, as for an id that never was).\n      release(source, request.log)\n',
    replace: '      // none for this client to see (404, as for an id that never was).\n',
    why: 'a resumable request answered 204 or 404 keeps its iterable',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'open-release-unavailable',
    file: 'lib/route/open.ts',
    find: "    if (decision?.kind === 'unavailable') {\n      release(source, request.log)\n",
    replace: "    if (decision?.kind === 'unavailable') {\n",
    why: 'a resumable request refused for its log keeps its iterable',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'open-release-refused',
    file: 'lib/route/open.ts',
    find: '    if (ticket === null) {\n      release(source, request.log)\n',
    replace: '    if (ticket === null) {\n',
    why: 'a refused stream (429, a late 503, a client gone) keeps its iterable',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'open-release-attached',
    file: 'lib/route/open.ts',
    find: 'source, () => release(source, request.log))',
    replace: 'source, () => {})',
    why: 'a resume that attaches to a running answer keeps the new iterable it was given',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'open-done-204',
    file: 'lib/route/open.ts',
    find: "decision.kind === 'done' ? 204 : 404",
    replace: "decision.kind === 'done' ? 404 : 204",
    why: 'a finished answer is 404 (the client errs) and an unknown one 204',
    tests: ['test/resumable-memory.test.ts']
  },
  // Resumable answers: the sealed ids, the logs, the producer and its followers.
  {
    id: 'resumable-seal-compare',
    file: 'lib/resumable/resumable-id.ts',
    find: 'return given.length === expected.length && timingSafeEqual(given, expected)',
    replace: 'return given.length === expected.length',
    why: 'any seal of the right length checks: a forged id resumes anyone\'s answer',
    tests: ['test/resumable-memory.test.ts', 'test/resumable-redis.test.ts']
  },
  {
    id: 'resumable-seal-owner',
    file: 'lib/resumable/resumable-id.ts',
    find: '.update(`${streamId}\\0${owner}`)',
    replace: '.update(streamId)',
    why: 'a seal is not bound to its owner: another key\'s id checks (an ended answer is told 204, not 404)',
    tests: ['test/resumable-memory.test.ts', 'test/resumable-redis.test.ts']
  },
  {
    id: 'resumable-seal-length',
    file: 'lib/resumable/resumable-id.ts',
    find: 'return given.length === expected.length && timingSafeEqual',
    replace: 'return timingSafeEqual',
    why: 'equivalent',
    equivalent: 'parseResumableEventId admits only 16-character seals and seal() makes 16: the lengths always match (the check keeps timingSafeEqual from throwing if either changed)',
    tests: []
  },
  {
    id: 'memory-log-create-once',
    file: 'lib/resumable/memory-log.ts',
    find: '    if (kept !== undefined) return { created: false, meta: metaOf(kept) }\n',
    replace: '',
    why: 'a second create replaces a running log: two producers, and the first one\'s events lost',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'memory-log-append-stopped',
    file: 'lib/resumable/memory-log.ts',
    find: '    if (kept === undefined || !kept.running) return null\n    return this.push(id, kept, events)',
    replace: '    if (kept === undefined) return null\n    return this.push(id, kept, events)',
    why: 'a cancelled log takes events after its end',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'memory-log-finish-once',
    file: 'lib/resumable/memory-log.ts',
    find: '    const kept = this.logs.get(id)\n    if (kept === undefined || !kept.running) return false\n    kept.running = false',
    replace: '    const kept = this.logs.get(id)\n    if (kept === undefined) return false\n    kept.running = false',
    why: 'a log ends twice: a second end entry, and cancel() says true again',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'memory-log-read-after',
    file: 'lib/resumable/memory-log.ts',
    find: 'const from = Math.max(0, after + 1 - kept.first)',
    replace: 'const from = Math.max(0, after - kept.first)',
    why: 'a resume replays the event the client already has',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'memory-log-expire-after-end',
    file: 'lib/resumable/memory-log.ts',
    find: '    clearTimeout(kept.expiry)\n    kept.expiry = this.expire(id, kept)\n',
    replace: '',
    why: 'an ended log is kept for ever (memory grows with every answer)',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'memory-log-record-refresh',
    file: 'lib/resumable/memory-log.ts',
    find: '    else kept.expiry.refresh()\n',
    replace: '',
    why: 'a recorded log expires ttlMs after its first record, not its last',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'memory-log-record-owner',
    file: 'lib/resumable/memory-log.ts',
    find: '} else if (kept.owner !== owner || !kept.running) {',
    replace: '} else if (!kept.running) {',
    why: "record() appends to another owner's log",
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'redis-log-create-once',
    file: 'lib/resumable/redis-log.ts',
    find: "if redis.call('EXISTS', KEYS[1]) == 1 then",
    replace: 'if false then',
    why: 'a second create resets a running log: two producers',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'redis-log-append-stopped',
    file: 'lib/resumable/redis-log.ts',
    find: "if m[1] ~= 'run' or m[2] ~= ARGV[1] then return -1 end",
    replace: 'if m[2] ~= ARGV[1] then return -1 end',
    why: 'a cancelled log takes its producer\'s events after its end',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'redis-log-finish-once',
    file: 'lib/resumable/redis-log.ts',
    find: "if m[1] ~= 'run' then return 0 end\nlocal t = redis.call('TIME')",
    replace: "local t = redis.call('TIME')",
    why: 'a log ends twice: a second end entry, and cancel() says true again',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'redis-log-stale-only',
    file: 'lib/resumable/redis-log.ts',
    find: "if ARGV[4] == 'stale' and now - tonumber(m[4]) <= tonumber(ARGV[5]) then return 0 end\n",
    replace: '',
    why: "a follower elsewhere reaps a live producer's answer as lost",
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'redis-log-read-exclusive',
    file: 'lib/resumable/redis-log.ts',
    find: 'pipeline.xrange(log, `(0-${after}`',
    replace: 'pipeline.xrange(log, `0-${after}`',
    why: 'a resume replays the event the client already has',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'redis-log-end-ttl',
    file: 'lib/resumable/redis-log.ts',
    find: "redis.call('PEXPIRE', KEYS[1], m[5])\nredis.call('PEXPIRE', KEYS[2], m[5])\n",
    replace: '',
    why: 'an ended log is kept its running slack (a minute) past its ttl',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'redis-log-heartbeat',
    file: 'lib/resumable/redis-log.ts',
    find: "redis.call('HSET', KEYS[1], 'h', t[1] * 1000 + math.floor(t[2] / 1000))\nlocal keep",
    replace: 'local keep',
    why: 'a live producer that is quiet for the liveness deadline is reaped as lost by its followers elsewhere',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'redis-log-record-ttl',
    file: 'lib/resumable/redis-log.ts',
    find: "redis.call('PEXPIRE', KEYS[1], ARGV[2])\nredis.call('PEXPIRE', KEYS[2], ARGV[2])\n",
    replace: '',
    why: 'a recorded log never expires',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'resumables-seal-check',
    file: 'lib/resumable/resumables.ts',
    find: "      if (!seal.holds(resumed, owner)) return { kind: 'notFound' }\n",
    replace: '',
    why: 'an id whose seal does not check resumes the answer, or is told 204 at its end',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'resumables-app-id-owner',
    file: 'lib/resumable/resumables.ts',
    find: "return read.meta.owner === owner ? { kind: 'attach', id, seal: seal.seal(id, owner), after: 0 } : { kind: 'notFound' }",
    replace: "return { kind: 'attach', id, seal: seal.seal(id, owner), after: 0 }",
    why: "another key asking for an app's id attaches to that answer",
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'resumables-resume-owner',
    file: 'lib/resumable/resumables.ts',
    find: "return read.meta.owner === owner ? { kind: 'attach', id: resumed.streamId, seal: sealed, after: resumed.seq } : { kind: 'notFound' }",
    replace: "return { kind: 'attach', id: resumed.streamId, seal: sealed, after: resumed.seq }",
    why: "an old id of an app's id, its log expired and made again by another key, resumes that key's answer",
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'resumables-unavailable',
    file: 'lib/resumable/resumables.ts',
    find: "      return { kind: 'unavailable' }\n",
    replace: '      throw error\n',
    why: 'a log out of reach is a 500, not a refusal with a Retry-After',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'resumables-expired-resync',
    file: 'lib/resumable/resumables.ts',
    find: "    subscriber.write(encodeEvent({ event: 'resync', data: { reason: 'expired' } }))\n",
    replace: '',
    why: 'a resume of an expired answer is told the end but not that it may have missed events',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'resumables-produce-owner',
    file: 'lib/resumable/resumables.ts',
    find: 'if (created.meta.owner !== owner) {',
    replace: 'if (false) {',
    why: "two keys opening the same app id at once: the second follows the first one's answer",
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'resumables-cancel-abort',
    file: 'lib/resumable/resumables.ts',
    find: "    this.produced.get(id)?.controller.abort('cancelled')\n",
    replace: '',
    why: 'equivalent',
    equivalent: "the log's own change notice aborts the producer too, with the same reason (the memory log: in a microtask queued before cancel() resolves; Redis: one round trip later): without this fast path only a notice lost while the listener reconnects would leave the producer running, which no test can time",
    tests: []
  },
  {
    id: 'resumables-changed-abort',
    file: 'lib/resumable/resumables.ts',
    find: "if (read === null || !read.meta.running) produced.controller.abort('cancelled')",
    replace: '',
    why: 'a cancel from another instance does not abort the producer where it runs',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'resumables-follow-end-reason',
    file: 'lib/resumable/resumables.ts',
    find: "subscriber.end(entry.outcome.kind === 'error' ? 'streamFailed' : 'ended')",
    replace: "subscriber.end('ended')",
    why: 'a failed answer is counted as ended',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'resumables-pump-failure',
    file: 'lib/resumable/resumables.ts',
    find: "      outcome = { kind: 'error', code: 'TOWER_SSE_STREAM_FAILED' }\n",
    replace: '',
    why: 'a producer that throws ends its answer as complete',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'resumables-stop-return',
    file: 'lib/resumable/resumables.ts',
    find: '      try { void Promise.resolve(iterator.return?.()).catch(() => {}) } catch {}\n',
    replace: '',
    why: "a cancelled producer's iterator is never returned: its finally never runs",
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'resumables-reap',
    file: 'lib/resumable/resumables.ts',
    find: '    if (followed.length > 0) this.log.reap(followed, LIVENESS_MS).catch(() => {})\n',
    replace: '',
    why: 'the followers of a dead producer wait for ever',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'resumables-heartbeat',
    file: 'lib/resumable/resumables.ts',
    find: '    if (mine.length > 0) this.log.heartbeat(mine)',
    replace: '    if (false) this.log.heartbeat(mine)',
    why: 'a live producer that is quiet for the liveness deadline is reaped as lost',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'resumables-attach-release',
    file: 'lib/resumable/resumables.ts',
    find: "    release()\n    if (decision.kind === 'attach') {",
    replace: "    if (decision.kind === 'attach') {",
    why: 'a resume keeps the new iterable it was given (and never starts it)',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'resumables-item-name',
    file: 'lib/resumable/resumables.ts',
    find: '  if (event !== undefined) checkEventName(event)\n  if (retry',
    replace: '  if (retry',
    why: 'a resumable item named `end` or `refused` reaches the client: tower-sse/client stops or waits',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'admission-log-unavailable',
    file: 'lib/admission/admission.ts',
    find: "this.refuse(reply, 'logUnavailable')",
    replace: "this.refuse(reply, 'capacity')",
    why: 'a resume refused for its log is told the server is full',
    tests: ['test/resumable-redis.test.ts']
  },
  // tower-sse/mcp: the EventStore on the plugin's log.
  {
    id: 'mcp-owner-domain',
    file: 'lib/mcp.ts',
    find: 'ownerHash(`mcp\\0${given.owner}`)',
    replace: 'ownerHash(given.owner)',
    why: 'an MCP event id checks on a stream route of the same key',
    tests: ['test/mcp-event-store.test.ts']
  },
  {
    id: 'mcp-log-per-owner',
    file: 'lib/mcp.ts',
    find: "createHash('sha256').update(`${ownerKey}\\0${streamId}`)",
    replace: "createHash('sha256').update(streamId)",
    why: "every owner's streams of one SDK id share a log",
    tests: ['test/mcp-event-store.test.ts']
  },
  {
    id: 'mcp-seal-check',
    file: 'lib/mcp.ts',
    find: '    if (!seal.holds(parsed, ownerKey)) return null\n',
    replace: '',
    why: 'an event id with a forged seal is replayed',
    tests: ['test/mcp-event-store.test.ts']
  },
  {
    id: 'mcp-priming-skipped',
    file: 'lib/mcp.ts',
    find: '      if (message === null) continue\n',
    replace: '',
    why: "the SDK's priming event is replayed as a message",
    tests: ['test/mcp-event-store.test.ts']
  },
  {
    id: 'mcp-follow-until-response',
    file: 'lib/mcp.ts',
    find: '      if (over && untilResponse) break\n',
    replace: '',
    why: "a follower sends on past the request's response",
    tests: ['test/mcp-event-store.test.ts']
  },
  {
    id: 'mcp-follow-opt-in',
    file: 'lib/mcp.ts',
    find: '      if (follow) {',
    replace: '      if (true) {',
    why: 'every replay follows the log (a transport running the request gets each message twice)',
    tests: ['test/mcp-event-store.test.ts']
  },
  {
    id: 'mcp-store-refused',
    file: 'lib/mcp.ts',
    find: "      if (seq === null) throw new Error('tower-sse/mcp: this stream\\'s log takes no more events (cancelled)')\n",
    replace: '',
    why: 'storeEvent() on a cancelled log resolves with an id of an event never stored',
    tests: ['test/mcp-event-store.test.ts']
  },
  // Options: the rules every group shares, and each group's own checks.
  {
    id: 'option-integer-min',
    file: 'lib/shared/option-rules.ts',
    find: 'value >= rule.min &&',
    replace: 'value > rule.min &&',
    why: 'an option at its minimum (maxClientsPerKey 0, history.events 0) is refused',
    tests: ['test/options.test.ts']
  },
  {
    id: 'option-integer-max',
    file: 'lib/shared/option-rules.ts',
    find: '(rule.max === undefined || value <= rule.max)',
    replace: '(rule.max === undefined || value < rule.max)',
    why: 'an option at its maximum is refused',
    tests: ['test/options.test.ts']
  },
  {
    id: 'option-integer-whole',
    file: 'lib/shared/option-rules.ts',
    find: 'Number.isSafeInteger(value) && value >= rule.min',
    replace: 'Number.isFinite(value) && value >= rule.min',
    why: 'a fractional option (maxClients 1.5) is accepted',
    tests: ['test/options.test.ts']
  },
  {
    id: 'option-group-unknown',
    file: 'lib/shared/option-rules.ts',
    find: '    if (!known.includes(key)) throw',
    replace: '    if (false) throw',
    why: 'a misspelt key in a group (storm: { tarpitMS }) is silently ignored',
    tests: ['test/options.test.ts']
  },
  {
    id: 'option-group-array',
    file: 'lib/shared/option-rules.ts',
    find: "if (typeof value !== 'object' || value === null || Array.isArray(value)) {\n    throw new TowerSseOptionError(name, value, `an object",
    replace: "if (typeof value !== 'object' || value === null) {\n    throw new TowerSseOptionError(name, value, `an object",
    why: 'an array stands for a group (its defaults silently)',
    tests: ['test/options.test.ts']
  },
  {
    id: 'option-suggestion-distance',
    file: 'lib/shared/option-rules.ts',
    find: 'bestDistance <= Math.max(2, Math.floor(name.length / 4))',
    replace: 'bestDistance < Math.max(2, Math.floor(name.length / 4))',
    why: 'a typo two edits away gets no "did you mean"',
    tests: ['test/options.test.ts']
  },
  {
    id: 'options-unknown-key',
    file: 'lib/options.ts',
    find: 'if (!KNOWN.includes(key) && !FASTIFY_REGISTER_OPTIONS.includes(key)) {',
    replace: 'if (false) {',
    why: 'a misspelt top-level option is silently ignored',
    tests: ['test/options.test.ts']
  },
  {
    id: 'options-moved-names',
    file: 'lib/options.ts',
    find: 'suggestion(key, KNOWN, MOVED)',
    replace: 'suggestion(key, KNOWN)',
    why: 'an option of an earlier version is not told where it went',
    tests: ['test/options.test.ts']
  },
  {
    id: 'admission-options-max-clients',
    file: 'lib/admission/admission-options.ts',
    find: "integer('maxClients', given.maxClients, D.maxClients, { min: 1 })",
    replace: "integer('maxClients', given.maxClients, D.maxClients, { min: 0 })",
    why: 'maxClients 0 (a plugin that admits no one) is accepted',
    tests: ['test/options.test.ts']
  },
  {
    id: 'admission-options-storm-bound',
    file: 'lib/admission/admission-options.ts',
    find: 'if (storm.maxRetryAfterSeconds < retryAfterSeconds) {',
    replace: 'if (storm.maxRetryAfterSeconds <= retryAfterSeconds) {',
    why: 'a storm bound equal to retryAfterSeconds (no widening) is refused',
    tests: ['test/options.test.ts']
  },
  {
    id: 'admission-options-storm-blame',
    file: 'lib/admission/admission-options.ts',
    find: 'if (retryAfterSet && given.maxRetryAfterSeconds === undefined) {',
    replace: 'if (retryAfterSet) {',
    why: 'a storm bound set below retryAfterSeconds is blamed on retryAfterSeconds',
    tests: ['test/options.test.ts']
  },
  {
    id: 'admission-options-burst-default',
    file: 'lib/admission/admission-options.ts',
    find: "integer('connectRate.burst', given.burst, perSecond, { min: 1 })",
    replace: "integer('connectRate.burst', given.burst, 1, { min: 1 })",
    why: 'connectRate without a burst admits one at a time instead of perSecond at once',
    tests: ['test/options.test.ts']
  },
  {
    id: 'admission-options-reject-with',
    file: 'lib/admission/admission-options.ts',
    find: "if (rejectWith !== '503' && rejectWith !== 'retry') throw",
    replace: 'if (false) throw',
    why: 'rejectWith: 503 (a number) or a typo is accepted and answers as a 503',
    tests: ['test/options.test.ts']
  },
  {
    id: 'history-options-events-zero',
    file: 'lib/events/history-options.ts',
    find: "integer('history.events', given.events, D.events, { min: 0 })",
    replace: "integer('history.events', given.events, D.events, { min: 1 })",
    why: 'history: { events: 0 } (keep none, every resume resyncs) is refused',
    tests: ['test/options.test.ts']
  },
  {
    id: 'redis-options-one-of',
    file: 'lib/bus/redis/redis-options.ts',
    find: 'if ((given.url === undefined) === (given.client === undefined)) {',
    replace: 'if (given.url === undefined && given.client === undefined) {',
    why: 'redis: { url, client } is accepted (the client silently ignored)',
    tests: ['test/options.test.ts']
  },
  {
    id: 'redis-options-key',
    file: 'lib/bus/redis/redis-options.ts',
    find: "if (typeof key !== 'string' || !REDIS_KEY.test(key))",
    replace: "if (typeof key !== 'string')",
    why: 'a redis.key with spaces, or empty, is accepted',
    tests: ['test/options.test.ts']
  },
  {
    id: 'redis-options-deaf-zero',
    file: 'lib/bus/redis/redis-options.ts',
    find: 'given.deafCloseMs, REDIS_DEFAULTS.deafCloseMs, { min: 0,',
    replace: 'given.deafCloseMs, REDIS_DEFAULTS.deafCloseMs, { min: 1,',
    why: 'deafCloseMs 0 (close at once past the receive deadline) is refused',
    tests: ['test/options.test.ts']
  },
  {
    id: 'route-options-dot-segments',
    file: 'lib/route/route-options.ts',
    find: " || path.split('/').some((segment) => segment === '.' || segment === '..')",
    replace: '',
    why: 'a path with a . or .. segment (never reached: clients resolve it away) is accepted',
    tests: ['test/options.test.ts']
  },
  {
    id: 'stream-options-max-age-jitter',
    file: 'lib/streams/stream-options.ts',
    find: 'max: Math.floor(MAX_TIMER_MS / (1 + JITTER_RATIO))',
    replace: 'max: MAX_TIMER_MS',
    why: 'a maxAgeMs whose jitter passes the longest timer is accepted (Node fires such a timer at once)',
    tests: ['test/options.test.ts']
  },
  {
    id: 'metrics-option-shape',
    file: 'lib/observe/metrics-option.ts',
    find: 'REGISTRY_METHODS.every(',
    replace: 'REGISTRY_METHODS.some(',
    why: 'an object with one of a Registry\'s methods passes for one',
    tests: ['test/options.test.ts']
  },
  // The plugin's own event names, refused on every path an app writes by.
  {
    id: 'encoder-reserved-names',
    file: 'lib/events/encoder.ts',
    find: '  if (RESERVED_EVENTS.has(event)) throw',
    replace: '  if (false) throw',
    why: "an app's event named `end` closes every tower-sse/client it reaches",
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'encoder-reserved-refused',
    file: 'lib/events/encoder.ts',
    find: "new Set(['end', 'refused'])",
    replace: "new Set(['end'])",
    why: "an app's event named `refused` makes tower-sse/client wait as for a 503",
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'encoder-app-event-checked',
    file: 'lib/events/encoder.ts',
    find: '  if (event.event !== undefined) checkEventName(event.event)\n  return encodeEvent(event)',
    replace: '  return encodeEvent(event)',
    why: 'send(), handle.send(), a per-request item and initialEvent may use the plugin\'s own names',
    tests: ['test/per-request-trust.test.ts']
  },
  {
    id: 'broadcast-event-name',
    file: 'lib/streams/broadcast.ts',
    find: '    if (event !== undefined) checkEventName(event)\n',
    replace: '',
    why: 'a broadcast named `end` is published',
    tests: ['test/per-request-trust.test.ts']
  },
  // Issue 44's last round: what the busy runs and bench:resume found.
  {
    id: 'redis-check-reads-across-epochs',
    file: 'lib/bus/redis/redis-bus.ts',
    find: 'page === READ_COUNT && !this.continuity.checkDue',
    replace: 'page === -1 && !this.continuity.checkDue',
    why: 'a check that finds a new epoch skips the epochs other instances started meanwhile: a resync with nothing lost',
    tests: ['test/bus-continuity.test.ts']
  },
  {
    id: 'resumable-cancel-read-on-end',
    file: 'lib/resumable/resumables.ts',
    find: 'if (produced === undefined || !ended) return',
    replace: 'if (produced === undefined || ended) return',
    why: 'a cancel from another instance never stops the producer where it runs',
    tests: ['test/resumable-redis.test.ts']
  },
  {
    id: 'resumable-pump-turns',
    file: 'lib/resumable/resumables.ts',
    find: 'if (pulls % PULLS_PER_TURN === 0) await nextTurn()',
    replace: 'if (pulls % PULLS_PER_TURN === -1) await nextTurn()',
    why: 'an always-ready producer holds the event loop until its answer is pulled (the bus probe unread, streams refused as deaf)',
    tests: ['test/resumable-memory.test.ts']
  },
  {
    id: 'per-request-pump-turns',
    file: 'lib/route/per-request.ts',
    find: 'if (pulls % PULLS_PER_TURN === 0) await nextTurn()',
    replace: 'if (pulls % PULLS_PER_TURN === -1) await nextTurn()',
    why: 'an always-ready per-request iterable holds the event loop until its budget is full',
    tests: ['test/per-request-trust.test.ts']
  }
]
