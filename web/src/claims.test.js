// Unit tests of the token claims the page reads: `npm test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readClaims, sameIdentity, expired, canWrite, whoText, shown } from './claims.js';

/**
 * jwt builds an unsigned token with this payload (the page never verifies).
 * @param {unknown} payload
 */
function jwt(payload) {
  const b64 = (/** @type {string} */ s) => Buffer.from(s).toString('base64url');
  return `${b64('{"alg":"HS256"}')}.${b64(JSON.stringify(payload))}.c2ln`;
}

test('claims are read from the payload', () => {
  const c = readClaims(jwt({ tenant: 'acme', sub: 'ann', exp: 5, scope: 'exec:attach exec:write', iat: 1 }));
  assert.ok(c);
  assert.equal(c.tenant, 'acme');
  assert.equal(c.sub, 'ann');
  assert.equal(c.exp, 5);
  assert.deepEqual([...c.scopes], ['exec:attach', 'exec:write']);
  const notUTF8 = 'a.' + Buffer.from([0xff, 0xfe]).toString('base64url') + '.c';
  for (const bad of ['', 'abc', 'a..c', 'a.!!!.c', jwt([1]), jwt('x'), jwt(null), notUTF8]) {
    assert.equal(readClaims(bad), null, bad);
  }
  assert.equal(readClaims(null), null);
});

test('identity ignores time, jti and scope, and nothing else', () => {
  const base = { tenant: 'acme', sub: 'ann', iss: 'x' };
  const a = jwt({ ...base, exp: 10, iat: 1, jti: '1', scope: 'exec:attach' });
  assert.ok(sameIdentity(a, jwt({ ...base, exp: 99, iat: 50, jti: '2', scope: 'exec:write' })));
  assert.ok(sameIdentity(a, jwt({ sub: 'ann', iss: 'x', tenant: 'acme' })), 'claim order does not matter');
  for (const other of [{ ...base, tenant: 'evil' }, { ...base, sub: 'eve' }, { ...base, org: 'evil' }, { tenant: 'acme', sub: 'ann' }]) {
    assert.ok(!sameIdentity(a, jwt(other)), JSON.stringify(other));
  }
  assert.ok(!sameIdentity('garbage', 'garbage2'));
  assert.ok(sameIdentity('garbage', 'garbage'), 'a token is itself');
});

test('expiry, write scope and the text shown', () => {
  assert.ok(expired(jwt({ exp: 10 }), 10_000));
  assert.ok(!expired(jwt({ exp: 11 }), 10_000));
  assert.ok(!expired(jwt({}), 10_000), 'no exp: the gateway decides');
  assert.ok(canWrite(jwt({ scope: 'exec:attach exec:write' })));
  assert.ok(!canWrite(jwt({ scope: 'exec:attach' })));
  assert.ok(canWrite('garbage'), 'unknown: the gateway refuses what it does not grant');
  assert.equal(whoText(jwt({ tenant: 'acme', sub: 'ann' })), 'tenant acme, subject ann');
  assert.equal(whoText(jwt({})), 'tenant (none), subject (none)');
  assert.equal(whoText('x'), 'an unreadable token');
  assert.equal(whoText(jwt({ tenant: 'a\u001b[31m\u202eb', sub: 'x'.repeat(100) })), `tenant a[31mb, subject ${'x'.repeat(63)}\u2026`);
  assert.equal(shown('abc', 2), 'a\u2026');
});
