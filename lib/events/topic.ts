const TOPIC = /^[A-Za-z0-9_.:-]{1,64}$/

/** A topic an event may carry and a stream may ask for: 1-64 characters of A-Z a-z 0-9 _ . : - */
export function isValidTopic (topic: unknown): topic is string {
  return typeof topic === 'string' && TOPIC.test(topic)
}
