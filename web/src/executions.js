// executions.js: the tenant's executions as the page lists them, over
// the gateway's HTTP API (gateway/PROTOCOL.md, "HTTP API"): list them and
// cancel one. Reattaching goes over the WebSocket, as every tab does.

import { shown } from './claims.js';

/**
 * @typedef {object} ExecutionInfo an execution as GET /v1/executions
 *   answers it (the fields the page uses).
 * @property {string} id
 * @property {string} status running, exited, failed, cancelled, timed_out or limit
 * @property {boolean} [pty]
 * @property {string} [started] RFC 3339
 * @property {string} [title] the terminal's title, from a gateway that keeps it
 * @property {boolean} [recorded] it has a recording (GET /v1/executions/{id}/recording)
 */

/**
 * @typedef {object} Row one line of the list, ready to show as text.
 * @property {string} id
 * @property {string} title the terminal's title when known, else ''
 * @property {string} status
 * @property {boolean} running
 * @property {boolean} pty
 * @property {string} started when it started, in the viewer's time zone ('' unknown)
 * @property {boolean} recorded it has a recording to download
 */

/** ExecutionsError is a refusal of the HTTP API: its status and stable code. */
export class ExecutionsError extends Error {
  /**
   * @param {number} status
   * @param {string} code
   * @param {string} message safe to show
   */
  constructor(status, code, message) {
    super(message || `the gateway answered ${status}`);
    this.name = 'ExecutionsError';
    this.status = status;
    this.code = code;
  }
}

/** Longest title shown in the list. */
const TITLE_MAX = 80;

/**
 * ExecutionsAPI lists and cancels the tenant's executions with the page's
 * token (Authorization: Bearer, the only way the HTTP API takes it).
 */
export class ExecutionsAPI {
  /**
   * @param {() => string | null} getToken the token to send; null: none
   * @param {typeof fetch} [fetchFn]
   */
  constructor(getToken, fetchFn = globalThis.fetch.bind(globalThis)) {
    this.getToken = getToken;
    this.fetch = fetchFn;
  }

  /**
   * list returns the tenant's executions, oldest first.
   * @returns {Promise<ExecutionInfo[]>}
   */
  async list() {
    return (await this.listPage()).executions;
  }

  /**
   * listPage returns the tenant's executions, oldest first, and the nodes
   * that did not answer in time (a cluster's partial list; none from a
   * single node).
   * @returns {Promise<{executions: ExecutionInfo[], unreachable: string[]}>}
   */
  async listPage() {
    const body = await this.call('GET', '/v1/executions');
    const executions = Array.isArray(body?.executions) ? body.executions : [];
    let unreachable = Array.isArray(body?.unreachable) ? body.unreachable.filter((/** @type {unknown} */ n) => typeof n === 'string') : [];
    if (body?.partial === true && unreachable.length === 0) unreachable = ['(unnamed)'];
    return { executions, unreachable };
  }

  /**
   * cancel asks the gateway to stop an execution (SIGTERM, then it ends
   * as cancelled) and returns it as the gateway answered.
   * @param {string} id
   * @returns {Promise<ExecutionInfo>}
   */
  async cancel(id) {
    return this.call('POST', `/v1/executions/${encodeURIComponent(id)}/cancel`);
  }

  /**
   * recording fetches an execution's recording (asciicast v2; what is
   * written so far of one still running).
   * @param {string} id
   * @returns {Promise<Blob>}
   */
  async recording(id) {
    const r = await this.send('GET', `/v1/executions/${encodeURIComponent(id)}/recording`);
    if (!r.ok) throw await refusal(r);
    return r.blob();
  }

  /**
   * preview makes a preview of a port of execution id: a URL that opens
   * its web server (the token needs exec:forward).
   * @param {string} id
   * @param {number} port
   * @returns {Promise<{url: string, expires_at: string}>}
   */
  async preview(id, port) {
    return this.call('POST', `/v1/executions/${encodeURIComponent(id)}/ports/${port}/preview`);
  }

  /**
   * upload writes file to name in the directory execution id started in
   * (the token needs files:write), whole or not at all; progress is
   * told the bytes sent so far.
   * @param {string} id
   * @param {string} name
   * @param {Blob} file
   * @param {(sent: number) => void} progress
   * @returns {Promise<{name: string, size: number}>}
   */
  upload(id, name, file, progress) {
    return new Promise((resolve, reject) => {
      const token = this.getToken();
      if (token === null) return reject(new ExecutionsError(401, 'unauthorized', 'no token'));
      const x = new XMLHttpRequest();
      x.open('PUT', `/v1/executions/${encodeURIComponent(id)}/files/${encodeURIComponent(name)}`);
      x.setRequestHeader('Authorization', `Bearer ${token}`);
      x.upload.onprogress = (e) => progress(e.loaded);
      x.onload = () => {
        let body = null;
        try {
          body = JSON.parse(x.responseText);
        } catch {
          body = null;
        }
        if (x.status >= 200 && x.status < 300) return resolve(body);
        reject(new ExecutionsError(x.status, body?.error ?? '', body?.message ?? `the gateway answered ${x.status}`));
      };
      x.onerror = () => reject(new ExecutionsError(0, 'unavailable', 'the upload broke off'));
      x.send(file);
    });
  }

  /**
   * download fetches a file from the directory execution id started in
   * (the token needs files:read).
   * @param {string} id
   * @param {string} path relative, "/"-separated
   * @returns {Promise<Blob>}
   */
  async download(id, path) {
    const p = path.split('/').filter((n) => n !== '').map(encodeURIComponent).join('/');
    const r = await this.send('GET', `/v1/executions/${encodeURIComponent(id)}/files/${p}`);
    if (!r.ok) throw await refusal(r);
    return r.blob();
  }

  /**
   * @param {string} method
   * @param {string} path
   */
  async call(method, path) {
    const r = await this.send(method, path);
    if (!r.ok) throw await refusal(r);
    return r.json().catch(() => null);
  }

  /**
   * send sends a request with the page's token.
   * @param {string} method
   * @param {string} path
   * @returns {Promise<Response>}
   */
  async send(method, path) {
    const token = this.getToken();
    if (token === null) throw new ExecutionsError(401, 'unauthorized', 'no token');
    return this.fetch(path, { method, headers: { Authorization: `Bearer ${token}` }, cache: 'no-store' });
  }
}

/**
 * partialText says which nodes a partial list lacks; '' for a whole list.
 * @param {string[]} unreachable
 * @returns {string}
 */
export function partialText(unreachable) {
  if (unreachable.length === 0) return '';
  return `Some nodes did not answer: ${unreachable.map((n) => shown(n, 63)).join(', ')}. Their executions are missing from this list.`;
}

/**
 * refusal is the ExecutionsError of an answer that is not ok.
 * @param {Response} r
 * @returns {Promise<ExecutionsError>}
 */
async function refusal(r) {
  let body = null;
  try {
    body = await r.json();
  } catch {
    body = null;
  }
  return new ExecutionsError(r.status, body?.error ?? '', body?.message ?? '');
}

/**
 * rows makes the list's lines, newest first (the shell just closed is
 * on top), running ones before ended ones.
 * @param {ExecutionInfo[]} list
 * @param {(id: string) => string} titleOf a title this browser saw for id ('' none)
 * @returns {Row[]}
 */
export function rows(list, titleOf) {
  return list
    .filter((e) => e && typeof e.id === 'string')
    .map((e) => ({
      id: e.id,
      title: shown(typeof e.title === 'string' && e.title ? e.title : titleOf(e.id), TITLE_MAX),
      status: typeof e.status === 'string' ? e.status.replace(/_/g, ' ') : '',
      running: e.status === 'running',
      pty: !!e.pty,
      started: startedText(e.started),
      recorded: e.recorded === true,
      at: Date.parse(e.started ?? '') || 0,
    }))
    .sort((a, b) => Number(b.running) - Number(a.running) || b.at - a.at)
    .map(({ at, ...row }) => row);
}

/**
 * startedText is a start time for people: the time alone today, else the
 * date and time.
 * @param {string | undefined} started
 * @param {Date} [now]
 * @returns {string}
 */
export function startedText(started, now = new Date()) {
  const at = new Date(started ?? '');
  if (Number.isNaN(at.getTime())) return '';
  const time = at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  return at.toDateString() === now.toDateString() ? time : `${at.toLocaleDateString()} ${time}`;
}
