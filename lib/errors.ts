import createError from '@fastify/error'

// Tower's refusals, with stable codes: match on `code`, never on the message.

export const TowerHostNotAllowedError = createError<[string]>(
  'TOWER_HOST_NOT_ALLOWED',
  'Host %s is not one this Tower answers (a guard against DNS rebinding): add it with --allowed-hosts or TOWER_ALLOWED_HOSTS',
  403
)

export const TowerCrossSiteError = createError<[string]>(
  'TOWER_CROSS_SITE',
  'a page from another site (%s) may not change anything here: its Origin must be an allowed host (--allowed-hosts or TOWER_ALLOWED_HOSTS)',
  403
)

export const TowerTokenRequiredError = createError(
  'TOWER_TOKEN_REQUIRED',
  'this Tower was started with --token (TOWER_TOKEN): send Authorization: Bearer <token>',
  401
)
