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
    id: 'registry-sweep-handle',
    file: 'lib/streams/registry.ts',
    find: '() => { this.cancelSweep = null })',
    replace: '() => {})',
    why: 'above one slice of streams, heartbeats stop after the first sliced pass',
    tests: ['test/heartbeat-sweep.test.ts']
  },
  {
    id: 'redis-deadline-offset',
    file: 'lib/bus/redis/redis-bus.ts',
    find: 'publishTimeoutMs / 4) + facts.offsetMs)',
    replace: 'publishTimeoutMs / 4))',
    why: 'the publish deadline is sent in local time, not Redis\'s',
    tests: ['test/bus-redis.test.ts']
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
    id: 'registry-heartbeat-slice',
    file: 'lib/streams/registry.ts',
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
    file: 'lib/tower/config.ts',
    find: 'Number(prefix) <= bits',
    replace: 'Number(prefix) < bits',
    why: '/32 and /128 (one address) are refused',
    tests: ['test/tower-config.test.ts']
  },
  {
    id: 'subscriber-budget-inclusive',
    file: 'lib/streams/subscriber.ts',
    find: 'this.res.writableLength + bytes <= this.limits.maxBufferedBytes',
    replace: 'this.res.writableLength + bytes < this.limits.maxBufferedBytes',
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
    find: 'if (this.tokens < 1) return false',
    replace: 'if (this.tokens <= 1) return false',
    why: 'the last whole token of the burst is refused',
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
    find: 'Math.min(window + Math.floor(this.options.random() * (window + 1)), max)',
    replace: 'window + Math.floor(this.options.random() * (window + 1))',
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
    id: 'registry-lost-survivors',
    file: 'lib/streams/registry.ts',
    find: '      if (this.resumes.survives(client, at.position)) continue\n',
    replace: '',
    why: 'a discontinuity resyncs a waiting client to an older id',
    tests: ['test/bus-continuity.test.ts']
  },
  {
    id: 'registry-topic-filter',
    file: 'lib/streams/registry.ts',
    find: 'if (client.wants(topic) && client.write(frame)) delivered++',
    replace: 'if (client.write(frame)) delivered++',
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
    find: "if prior then return { 'dup', prior } end",
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
    find: 'if (left > 0) this.perKey.set',
    replace: 'if (left >= 0) this.perKey.set',
    why: 'equivalent',
    equivalent: 'a key with 0 streams stays in the map as 0 instead of being deleted: countForKey answers 0 either way (memory only)',
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
  }
]
