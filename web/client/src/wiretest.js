// wiretest.js: what the unit tests need of the wire besides wire.js, which
// has no use for it: an encoder of output frames, as the gateway sends them.

/**
 * outputFrame encodes an output frame; length, when given, is the length
 * field's value, to make a frame whose bytes do not match it.
 * @param {number} channel
 * @param {number} seq
 * @param {number} stream
 * @param {number} offset
 * @param {Uint8Array} bytes
 * @param {number} [length]
 * @returns {ArrayBuffer}
 */
export function outputFrame(channel, seq, stream, offset, bytes, length = bytes.length) {
  const b = new Uint8Array(26 + bytes.length);
  const v = new DataView(b.buffer);
  v.setUint8(0, 1);
  v.setUint32(1, channel);
  v.setBigUint64(5, BigInt(seq));
  v.setUint8(13, stream);
  v.setBigUint64(14, BigInt(offset));
  v.setUint32(22, length);
  b.set(bytes, 26);
  return b.buffer;
}
