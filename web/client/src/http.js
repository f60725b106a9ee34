// http.js: termgate's HTTP API (gateway/PROTOCOL.md, "HTTP API") for
// callers that make one call at a time, agents above all: agent exec,
// executions, files and previews. Every call is safe to send again, and is
// sent again after a failure to reach the gateway or an `unavailable`
// answer: a start carries an id, a write its input offset, a read its seq.

import { backoffDelay } from './transport.js';

/**
 * TermgateError is a refusal by the gateway: `code` is one of CODES
 * (wire.js), `status` the HTTP status, `message` safe to show.
 */
export class TermgateError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {number} [status]
   */
  constructor(code, message, status = 0) {
    super(message ? `${code}: ${message}` : code);
    this.name = 'TermgateError';
    /** @type {string} */
    this.code = code;
    /** @type {number} */
    this.status = status;
  }
}

/**
 * @typedef {object} Wait
 * @property {number} [yield_ms] longest wait in ms (10000 when absent, at most 60000)
 * @property {number} [max_output_bytes] most bytes of output text (65536 when absent)
 * @property {boolean} [strip_ansi] remove escape sequences (default: on a terminal)
 * @property {number} [seq] first event to read: an earlier answer's next_seq
 */

/**
 * @typedef {Wait & {
 *   id?: string, argv?: string[], command?: string, cwd?: string, env?: Record<string, string>,
 *   tty?: boolean, rows?: number, cols?: number, interactive?: boolean, timeout_ms?: number,
 *   limits?: Record<string, number>, network?: string, workspace_read_only?: boolean,
 *   mounts?: string[], proc?: 'none'|'self-exe'|'private', result_max_output_bytes?: number,
 *   retention_ms?: number, stdin?: string, close_stdin?: boolean
 * }} ExecRequest
 */

/**
 * @typedef {object} ExecResult
 * @property {string} id
 * @property {boolean} running
 * @property {{code: number, signal?: string, reason: string}} [exit]
 * @property {string} output stdout and stderr as text, in the order written
 * @property {number} omitted_bytes left out of output at omitted_at
 * @property {number} [omitted_at]
 * @property {number} [replaced_bytes] bytes that were not UTF-8
 * @property {number} [lost_bytes] output the history no longer held
 * @property {number} from_seq
 * @property {number} next_seq where the next call reads from
 * @property {number} input_offset
 * @property {string} incarnation
 */

/**
 * @typedef {object} FileEntry
 * @property {string} name
 * @property {string} [raw] the name's bytes (base64) when they are not UTF-8
 * @property {'file'|'dir'|'symlink'|'other'} type
 * @property {number} size
 * @property {string} mode octal permission bits, such as "0644"
 * @property {string} mtime RFC 3339
 * @property {string} [target] a symlink's target
 * @property {string} [etag]
 */

/**
 * @typedef {object} HTTPOptions
 * @property {string} url the gateway's base URL, http(s)://host:port
 * @property {() => (string | null | Promise<string | null>)} getToken a bearer token, asked for each call
 * @property {typeof fetch} [fetch] (tests)
 * @property {number} [retries] times a call is sent again (2)
 */

/** The answer's bytes when the path is a file, JSON otherwise. */
const JSON_TYPE = /^application\/json\b/;

/**
 * TermgateHTTP calls a gateway's HTTP API.
 */
export class TermgateHTTP {
  /** @param {HTTPOptions} opts */
  constructor(opts) {
    if (!/^https?:\/\//.test(opts.url)) throw new TypeError(`termgate: url ${JSON.stringify(opts.url)} must start with http:// or https://`);
    this._url = opts.url.replace(/\/+$/, '');
    this._getToken = opts.getToken;
    this._fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this._retries = opts.retries ?? 2;
  }

  /**
   * exec starts a command (argv, or command run by /bin/sh -c), or
   * continues the execution req.id names, and waits for its exit or
   * req.yield_ms. A start without an id is given one, so that a retry
   * finds the execution the first try made.
   * @param {ExecRequest} req
   * @returns {Promise<ExecResult>}
   */
  async exec(req) {
    const body = { ...req };
    if (!body.id && (body.argv || body.command)) body.id = randomID();
    return /** @type {Promise<ExecResult>} */ (this._json('POST', '/v1/exec', body));
  }

  /**
   * write writes input to execution id at offset (the input offset it
   * starts at, which makes a retry harmless; without one it is appended
   * and a retry may repeat it) and waits for what follows.
   * @param {string} id
   * @param {Wait & {input: string, offset?: number, close_stdin?: boolean}} req
   * @returns {Promise<ExecResult>}
   */
  async write(id, req) {
    // Without an offset a retry could write the input twice: none then.
    return /** @type {Promise<ExecResult>} */ (this._json('POST', `/v1/executions/${enc(id)}/write`, req, req.offset !== undefined));
  }

  /** @returns {Promise<{executions: any[], partial?: boolean, unreachable?: string[]}>} */
  async list() {
    return this._json('GET', '/v1/executions');
  }

  /** @param {string} id */
  async get(id) {
    return this._json('GET', `/v1/executions/${enc(id)}`);
  }

  /** @param {string} id */
  async cancel(id) {
    return this._json('POST', `/v1/executions/${enc(id)}/cancel`);
  }

  /**
   * readFile reads a file of the tenant's workspace (or, with id, beside
   * that execution: relative to the directory it started in).
   * @param {string} path
   * @param {{id?: string}} [opts]
   * @returns {Promise<Uint8Array>}
   */
  async readFile(path, opts = {}) {
    const resp = await this._call('GET', filesPath(path, opts.id));
    return new Uint8Array(await resp.arrayBuffer());
  }

  /**
   * writeFile writes a file atomically: a program sees the old content or
   * the new, never a part.
   * @param {string} path
   * @param {string | Uint8Array} data
   * @param {{id?: string, mode?: string}} [opts]
   * @returns {Promise<FileEntry>}
   */
  async writeFile(path, data, opts = {}) {
    const q = opts.mode ? `?mode=${encodeURIComponent(opts.mode)}` : '';
    const resp = await this._call('PUT', filesPath(path, opts.id) + q, typeof data === 'string' ? new TextEncoder().encode(data) : data, 'application/octet-stream');
    return resp.json();
  }

  /**
   * listFiles lists a directory: one page, by name, and the next page's
   * after when there is one.
   * @param {string} path
   * @param {{id?: string, after?: string}} [opts]
   * @returns {Promise<{entries: FileEntry[], next?: string}>}
   */
  async listFiles(path, opts = {}) {
    const dir = path.endsWith('/') ? path : path + '/';
    const q = opts.after ? `?after=${encodeURIComponent(opts.after)}` : '';
    return this._json('GET', filesPath(dir, opts.id) + q);
  }

  /**
   * ports lists the TCP ports execution id's programs listen on.
   * @param {string} id
   * @returns {Promise<{ports: {address: string, port: number}[]}>}
   */
  async ports(id) {
    return this._json('GET', `/v1/executions/${enc(id)}/ports`);
  }

  /**
   * preview returns a URL that opens the web server a program of execution
   * id listens with on port.
   * @param {string} id
   * @param {number} port
   * @param {number} [ttlSeconds]
   * @returns {Promise<{url: string, name: string, expires_at: string}>}
   */
  async preview(id, port, ttlSeconds) {
    return this._json('POST', `/v1/executions/${enc(id)}/ports/${port}/preview`, ttlSeconds ? { ttl_seconds: ttlSeconds } : {});
  }

  /**
   * @param {string} method
   * @param {string} path
   * @param {unknown} [body]
   * @param {boolean} [safe] whether the call may be sent again
   */
  async _json(method, path, body, safe = true) {
    const data = body === undefined ? undefined : new TextEncoder().encode(JSON.stringify(body));
    const resp = await this._call(method, path, data, 'application/json', safe);
    return resp.json();
  }

  /**
   * _call sends a request, again after a failure to reach the gateway or
   * an unavailable answer, and returns a 2xx answer or throws.
   * @param {string} method
   * @param {string} path
   * @param {Uint8Array} [body]
   * @param {string} [type]
   * @param {boolean} [safe] whether the call may be sent again
   * @returns {Promise<Response>}
   */
  async _call(method, path, body, type, safe = true) {
    const retries = safe ? this._retries : 0;
    for (let attempt = 0; ; attempt++) {
      const token = await this._getToken();
      if (!token) throw new TermgateError('unauthorized', 'no token to be had');
      /** @type {Record<string, string>} */
      const headers = { Authorization: `Bearer ${token}` };
      if (body && type) headers['Content-Type'] = type;
      let resp;
      try {
        resp = await this._fetch(this._url + path, { method, headers, body: /** @type {BodyInit | undefined} */ (body) });
      } catch (err) {
        if (attempt >= retries) throw err;
        await sleep(backoffDelay(attempt + 1));
        continue;
      }
      if (resp.ok) return resp;
      const err = await errorOf(resp);
      if (err.code !== 'unavailable' || attempt >= retries) throw err;
      await sleep(backoffDelay(attempt + 1));
    }
  }
}

/**
 * @param {Response} resp
 * @returns {Promise<TermgateError>}
 */
async function errorOf(resp) {
  let code = 'internal';
  let message = `the gateway answered ${resp.status}`;
  if (JSON_TYPE.test(resp.headers.get('Content-Type') ?? '')) {
    const b = await resp.json().catch(() => null);
    if (b && typeof b.error === 'string') {
      code = b.error;
      message = typeof b.message === 'string' ? b.message : '';
    }
  }
  return new TermgateError(code, message, resp.status);
}

/**
 * filesPath is path under the files API: the workspace's, or beside
 * execution id; each name percent-encoded.
 * @param {string} path
 * @param {string} [id]
 */
function filesPath(path, id) {
  const p = path.replace(/^\/+/, '').split('/').map(encodeURIComponent).join('/');
  return id ? `/v1/executions/${enc(id)}/files/${p}` : `/v1/files/${p}`;
}

/** @param {string} s */
const enc = (s) => encodeURIComponent(s);

/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function randomID() {
  const b = new Uint8Array(10);
  crypto.getRandomValues(b);
  return 'x-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}
