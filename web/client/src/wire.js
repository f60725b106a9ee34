// wire.js: the parts of wire protocol v1 (gateway/PROTOCOL.md) that the
// browser client shares with the gateway: the subprotocol, the binary
// frames, the control messages' shape and the error codes the client acts
// on. It mirrors the Go package gateway/wire; no state, no I/O.

/** Subprotocol of wire protocol v1. */
export const SUBPROTOCOL = 'termgate.v1';
/** Prefix of the subprotocol entry that carries the token. */
export const BEARER_PREFIX = 'termgate.bearer.';

const FRAME_OUTPUT = 0x01;
const FRAME_INPUT = 0x02;
const OUTPUT_HEADER = 26;
const INPUT_HEADER = 13;

/** Names of output streams by their number in an output frame. */
export const STREAMS = Object.freeze({ 1: 'pty', 2: 'stdout', 3: 'stderr' });

/**
 * FATAL_ERRORS are the error codes after which an execution cannot be
 * followed any more, when they answer its start or attach. A test compares
 * this list with the Go side: keep it one sorted array of quoted codes.
 */
/**
 * CLOSE_SERVICE_RESTART is the close code of a gateway that restarts: its
 * executions live on, so reconnect and resume (PROTOCOL.md, "Restarts").
 */
export const CLOSE_SERVICE_RESTART = 1012;

/**
 * CODES are every error code the gateway sends, over the WebSocket or
 * HTTP (gateway/wire's Codes; a test keeps them in step): the `code` of a
 * TermgateError. Same format as FATAL_ERRORS.
 */
export const CODES = Object.freeze([
  'bad_request', 'capacity', 'closed', 'conflict', 'forbidden', 'gone', 'input_full', 'input_offset',
  'insufficient_storage', 'internal', 'invalid_after', 'invalid_id', 'invalid_request', 'invalid_spec',
  'no_pipes', 'not_attached', 'not_found', 'not_pty', 'not_running', 'precondition_failed', 'rate_limited',
  'read_only', 'refused', 'request_timeout', 'signal_not_allowed', 'too_large', 'too_many_channels',
  'too_many_connections', 'too_many_streams', 'unauthorized', 'unavailable', 'unenforceable', 'unsupported',
]);

export const FATAL_ERRORS = Object.freeze([
  'capacity', 'conflict', 'forbidden', 'gone', 'invalid_id', 'invalid_spec', 'not_found',
  'too_many_channels', 'unauthorized', 'unenforceable',
]);

/**
 * INPUT_REFUSED_ERRORS are the error codes refusing input, which is then
 * resent after a pause from the offset the error reports. Same format as
 * FATAL_ERRORS.
 */
export const INPUT_REFUSED_ERRORS = Object.freeze([
  'input_full', 'input_offset', 'rate_limited', 'unavailable',
]);

/**
 * @typedef {object} Message a control message of PROTOCOL.md; which fields
 *   are present depends on its type.
 * @property {string} type
 * @property {string} [req]
 * @property {number} [channel]
 * @property {string} [id]
 * @property {number} [seq]
 * @property {string} [event] event: started, resize, stdin-closed, signal, notice
 * @property {string} [status]
 * @property {boolean} [pty]
 * @property {boolean} [read_only]
 * @property {number} [last_seq]
 * @property {number} [input_offset]
 * @property {number} [from]
 * @property {number} [to]
 * @property {number} [bytes]
 * @property {number} [code]
 * @property {string} [signal]
 * @property {string} [reason]
 * @property {string} [error]
 * @property {string} [message]
 * @property {string} [incarnation] attached: which execution the ID names now
 * @property {boolean} [ack] attached: output is acknowledged on this channel
 * @property {string} [flow] attached: hold or live
 * @property {string} [cause] gap: read_only, live, hold_expired or unheld
 * @property {boolean} [inexact] gap: bytes is only an upper bound
 * @property {number} [input_end] input-ack: end of the newest input frame processed
 * @property {string} [data] snapshot: the escape sequences that redraw the screen
 * @property {number} [seen] snapshot: the output bytes up to seq
 * @property {number} [rows] started, resize, snapshot
 * @property {number} [cols] started, resize, snapshot
 * @property {string} [at] notice event: when the timeout it announces fires (RFC 3339), absent when nothing is due
 * @property {string} [server] hello
 * @property {number} [protocol] hello
 * @property {string[]} [features] hello: ack, input-ack, seen, flow
 * @property {Record<string, number>} [limits] hello
 * @property {number} [retry_ms] error unavailable, detached: how long to wait before asking again
 * @property {string} [node] hello, started, attached: the node serving it (a routing hint only)
 */

/**
 * @typedef {{channel: number, seq: number, stream: number, offset: number, data: Uint8Array}} OutputFrame
 */

/**
 * decodeOutput parses an output frame. It returns null for a frame that is
 * not output, and throws when the bytes are fewer or more than the length
 * field says (a message cut short by a failing connection).
 * @param {ArrayBuffer} buf
 * @returns {OutputFrame | null}
 */
export function decodeOutput(buf) {
  if (buf.byteLength < 1) return null;
  const v = new DataView(buf);
  if (v.getUint8(0) !== FRAME_OUTPUT) return null;
  if (buf.byteLength < OUTPUT_HEADER) throw new Error(`termgate: output frame of ${buf.byteLength} bytes has no full header`);
  const length = v.getUint32(22);
  if (length !== buf.byteLength - OUTPUT_HEADER) {
    throw new Error(`termgate: output frame holds ${buf.byteLength - OUTPUT_HEADER} bytes, its header says ${length}`);
  }
  return {
    channel: v.getUint32(1),
    seq: Number(v.getBigUint64(5)),
    stream: v.getUint8(13),
    offset: Number(v.getBigUint64(14)),
    data: new Uint8Array(buf, OUTPUT_HEADER, length),
  };
}

/**
 * encodeInput builds an input frame.
 * @param {number} channel
 * @param {number} offset input bytes sent before these
 * @param {Uint8Array} data
 * @returns {Uint8Array<ArrayBuffer>}
 */
export function encodeInput(channel, offset, data) {
  const out = new Uint8Array(INPUT_HEADER + data.length);
  const v = new DataView(out.buffer);
  v.setUint8(0, FRAME_INPUT);
  v.setUint32(1, channel);
  v.setBigUint64(5, BigInt(offset));
  out.set(data, INPUT_HEADER);
  return out;
}
