// @termgate/client: termgate's client for browsers, Node 20+ and VS Code
// (gateway/PROTOCOL.md). TermgateClient follows executions over one
// WebSocket, resuming after every disconnect with nothing lost or
// repeated; TermgateHTTP makes the HTTP API's calls (agent exec, files,
// previews). The VS Code adapter is the "/vscode" export.

export { TermgateClient } from './termgate-client.js';
export { Execution } from './execution.js';
export { TermgateHTTP, TermgateError } from './http.js';
export { SUBPROTOCOL, BEARER_PREFIX, STREAMS, CODES, FATAL_ERRORS, INPUT_REFUSED_ERRORS, CLOSE_SERVICE_RESTART, decodeOutput, encodeInput } from './wire.js';
export { backoffDelay } from './transport.js';

/**
 * @typedef {import('./termgate-client.js').ClientOptions} ClientOptions
 * @typedef {import('./termgate-client.js').StartOptions} StartOptions
 * @typedef {import('./http.js').HTTPOptions} HTTPOptions
 * @typedef {import('./http.js').ExecRequest} ExecRequest
 * @typedef {import('./http.js').ExecResult} ExecResult
 * @typedef {import('./http.js').Wait} Wait
 * @typedef {import('./http.js').FileEntry} FileEntry
 */
