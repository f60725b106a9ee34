// claims.js: what the page reads from a token's payload. The claims are
// decoded, never verified: the gateway verifies every token. The page
// uses them only to tell the user which tenant and subject a token is for
// (before a link replaces the stored token), whether it may write, and
// why it was refused. The token itself is never shown or logged.

/** Longest claim value shown; a longer one is cut with an ellipsis. */
const SHOWN_MAX = 64;

/** Claims that change between two tokens of one identity: they do not tell identities apart. */
const VOLATILE = new Set(['exp', 'iat', 'nbf', 'jti', 'scope']);

/**
 * @typedef {object} Claims what a token's payload says, as the page uses it.
 * @property {string} tenant the tenant claim ('' when absent)
 * @property {string} sub the subject ('' when absent)
 * @property {number} exp expiry in seconds since the epoch (0 when absent)
 * @property {Set<string>} scopes the scope claim's entries
 * @property {string} identity every claim but the volatile ones, canonically:
 *   two tokens of one tenant and subject from one issuer have the same
 */

/**
 * readClaims decodes a JWT's payload, or returns null for anything that
 * is not a JWT with a JSON object payload.
 * @param {string | null | undefined} token
 * @returns {Claims | null}
 */
export function readClaims(token) {
  const part = typeof token === 'string' ? token.split('.')[1] : undefined;
  if (!part) return null;
  let payload;
  try {
    const b64 = part.replace(/-/g, '+').replace(/_/g, '/');
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    payload = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    return null;
  }
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) return null;
  return {
    tenant: typeof payload.tenant === 'string' ? payload.tenant : '',
    sub: typeof payload.sub === 'string' ? payload.sub : '',
    exp: typeof payload.exp === 'number' ? payload.exp : 0,
    scopes: new Set(typeof payload.scope === 'string' ? payload.scope.split(' ').filter(Boolean) : []),
    identity: identityOf(payload),
  };
}

/**
 * identityOf is the payload without its volatile claims, as JSON with
 * sorted keys. A gateway may name the tenant claim otherwise than
 * "tenant": comparing every stable claim still tells tenants apart.
 * @param {Record<string, unknown>} payload
 * @returns {string}
 */
function identityOf(payload) {
  const keys = Object.keys(payload).filter((k) => !VOLATILE.has(k)).sort();
  return JSON.stringify(keys.map((k) => [k, payload[k]]));
}

/**
 * sameIdentity reports whether two tokens are for the same tenant and
 * subject (every stable claim equal). A token that cannot be decoded is
 * the same only as itself.
 * @param {string} a
 * @param {string} b
 * @returns {boolean}
 */
export function sameIdentity(a, b) {
  if (a === b) return true;
  const ca = readClaims(a);
  const cb = readClaims(b);
  return ca !== null && cb !== null && ca.identity === cb.identity;
}

/**
 * expired reports whether a token's exp claim has passed. Only to say
 * why the gateway refused it: the gateway decides, with its own clock.
 * @param {string} token
 * @param {number} [now] ms since the epoch
 * @returns {boolean}
 */
export function expired(token, now = Date.now()) {
  const c = readClaims(token);
  return c !== null && c.exp > 0 && c.exp * 1000 <= now;
}

/**
 * canWrite reports whether a token grants exec:write (input, cancel).
 * A token whose scope cannot be read is assumed to: the gateway refuses
 * what it does not grant, and the page then says so.
 * @param {string} token
 * @returns {boolean}
 */
export function canWrite(token) {
  const c = readClaims(token);
  return c === null || c.scopes.size === 0 || c.scopes.has('exec:write');
}

/**
 * whoText names a token's tenant and subject for people, as plain text
 * (the caller puts it in textContent).
 * @param {string} token
 * @returns {string}
 */
export function whoText(token) {
  const c = readClaims(token);
  if (!c) return 'an unreadable token';
  const tenant = c.tenant ? shown(c.tenant) : '(none)';
  const sub = c.sub ? shown(c.sub) : '(none)';
  return `tenant ${tenant}, subject ${sub}`;
}

/**
 * shown makes a value from outside (a claim, a terminal title) safe and
 * short to show as text: control and bidirectional-override characters
 * removed, cut to max characters with an ellipsis.
 * @param {string} s
 * @param {number} [max]
 * @returns {string}
 */
export function shown(s, max = SHOWN_MAX) {
  // eslint-disable-next-line no-control-regex
  const clean = s.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g, '');
  return clean.length > max ? clean.slice(0, max - 1) + '\u2026' : clean;
}
