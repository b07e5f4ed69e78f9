/**
 * The prefix of every key the bus (and Tower's instance board) touches for one `redisKey`: the
 * key in a hash tag, `{<redisKey>}`, so that on a Redis Cluster the stream, the meta hash, the
 * idempotency and probe keys all hash to one slot (the script, XREAD and MULTI touch several
 * together; keys of different slots are refused with CROSSSLOT). The tag is the text between the
 * first `{` and the first `}` after it, so braces inside `redisKey` still leave every key with
 * this same prefix in one slot. One scheme for a single server too: no form of key depends on
 * the deployment.
 */
export function keyPrefix (redisKey: string): string {
  return `{${redisKey}}`
}
