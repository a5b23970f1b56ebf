// JSON that keeps 64-bit integers: the same values and the same bytes as the Rust side
// (serde_json with `preserve_order`), so a JS plugin replays the golden transcripts byte for
// byte.
//
// - `parse`: an integer literal beyond 2^53 becomes a BigInt (JSON.parse would round
//   9223372036854775807 to 2^63); everything else as JSON.parse gives it. Object members
//   keep their order; a duplicate key keeps the last value, as serde_json does.
// - `stringify`: no spaces; BigInt as its digits; a non-integral number the way Rust prints
//   an f64 (`6.5`, `1e21`, `1.5e-7`). Strings escape what serde_json escapes.
//
// Known difference: a float literal with an integral value (`2.0`) parses as the Number 2 and
// prints as `2` (serde_json prints `2.0`). To print a computed number as an f64 whatever its
// value, wrap it: `float(3)` prints `3.0`.

/** @typedef {null | boolean | number | bigint | string | JsonValue[] | {[key: string]: JsonValue}} JsonValue */

/** A number that prints as an f64 (`3.0`, not `3`): see `float`. */
export class Float {
  /** @param {number} value */
  constructor(value) {
    this.value = value;
  }
}

/** `x`, printed as Rust prints an f64. @param {number} x */
export function float(x) {
  return new Float(x);
}

/** Nesting deeper than this is refused (a stack overflow is not a reply). */
export const MAX_DEPTH = 128;

/** A text that is not JSON: `offset` is where it stopped making sense. */
export class JsonError extends Error {
  /** @param {string} reason @param {number} offset */
  constructor(reason, offset) {
    super(`${reason} at offset ${offset}`);
    this.name = "JsonError";
    this.reason = reason;
    this.offset = offset;
  }
}

const decoder = new TextDecoder("utf-8", { fatal: true });

/**
 * Parse one JSON value (text, or UTF-8 bytes).
 * @param {string | Uint8Array} input
 * @returns {JsonValue}
 */
export function parse(input) {
  let text;
  if (typeof input === "string") {
    text = input;
  } else {
    try {
      text = decoder.decode(input);
    } catch {
      throw new JsonError("invalid utf-8", 0);
    }
  }
  const p = new Parser(text);
  p.ws();
  const value = p.value(0);
  p.ws();
  if (p.i !== text.length) p.fail("trailing characters");
  return value;
}

class Parser {
  /** @param {string} s */
  constructor(s) {
    this.s = s;
    this.i = 0;
  }

  /** @param {string} reason @returns {never} */
  fail(reason) {
    throw new JsonError(reason, this.i);
  }

  ws() {
    const s = this.s;
    while (this.i < s.length) {
      const c = s.charCodeAt(this.i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) this.i++;
      else break;
    }
  }

  /** @param {number} depth @returns {JsonValue} */
  value(depth) {
    if (depth > MAX_DEPTH) this.fail(`nesting deeper than ${MAX_DEPTH}`);
    const c = this.s[this.i];
    switch (c) {
      case "{":
        return this.object(depth);
      case "[":
        return this.array(depth);
      case '"':
        return this.string();
      case "t":
        return this.word("true", true);
      case "f":
        return this.word("false", false);
      case "n":
        return this.word("null", null);
      default:
        if (c === "-" || (c >= "0" && c <= "9")) return this.number();
        return this.fail(c === undefined ? "unexpected end" : "expected a value");
    }
  }

  /** @template T @param {string} w @param {T} v @returns {T} */
  word(w, v) {
    if (this.s.startsWith(w, this.i)) {
      this.i += w.length;
      return v;
    }
    return this.fail("expected a value");
  }

  /** @param {number} depth */
  object(depth) {
    this.i++;
    /** @type {{[key: string]: JsonValue}} */
    const out = {};
    this.ws();
    if (this.s[this.i] === "}") {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.s[this.i] !== '"') this.fail("expected a key");
      const key = this.string();
      this.ws();
      if (this.s[this.i] !== ":") this.fail("expected ':'");
      this.i++;
      this.ws();
      const v = this.value(depth + 1);
      // A later duplicate replaces the value but keeps the first position, as serde_json's
      // IndexMap does. `defineProperty` so that a key "__proto__" is a plain member.
      Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
      this.ws();
      const c = this.s[this.i++];
      if (c === "}") return out;
      if (c !== ",") {
        this.i--;
        this.fail("expected ',' or '}'");
      }
    }
  }

  /** @param {number} depth */
  array(depth) {
    this.i++;
    /** @type {JsonValue[]} */
    const out = [];
    this.ws();
    if (this.s[this.i] === "]") {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      out.push(this.value(depth + 1));
      this.ws();
      const c = this.s[this.i++];
      if (c === "]") return out;
      if (c !== ",") {
        this.i--;
        this.fail("expected ',' or ']'");
      }
    }
  }

  string() {
    const s = this.s;
    this.i++;
    let out = "";
    let start = this.i;
    for (;;) {
      if (this.i >= s.length) this.fail("unterminated string");
      const c = s.charCodeAt(this.i);
      if (c === 0x22) {
        out += s.slice(start, this.i);
        this.i++;
        return out;
      }
      if (c < 0x20) this.fail("control character in string");
      if (c !== 0x5c) {
        this.i++;
        continue;
      }
      out += s.slice(start, this.i);
      const e = s[this.i + 1];
      this.i += 2;
      switch (e) {
        case '"':
          out += '"';
          break;
        case "\\":
          out += "\\";
          break;
        case "/":
          out += "/";
          break;
        case "b":
          out += "\b";
          break;
        case "f":
          out += "\f";
          break;
        case "n":
          out += "\n";
          break;
        case "r":
          out += "\r";
          break;
        case "t":
          out += "\t";
          break;
        case "u": {
          const hex = s.slice(this.i, this.i + 4);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.fail("bad \\u escape");
          out += String.fromCharCode(parseInt(hex, 16));
          this.i += 4;
          break;
        }
        default:
          this.i -= 1;
          this.fail("bad escape");
      }
      start = this.i;
    }
  }

  number() {
    const s = this.s;
    const start = this.i;
    const m = /^-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(s.slice(start, start + 400));
    if (!m) return this.fail("bad number");
    this.i += m[0].length;
    const text = m[0];
    if (m[1] === undefined && m[2] === undefined) {
      const n = Number(text);
      return Number.isSafeInteger(n) ? n : BigInt(text);
    }
    const f = Number(text);
    if (!Number.isFinite(f)) {
      this.i = start;
      this.fail("number out of range");
    }
    return f;
  }
}

/**
 * One line of JSON, no spaces.
 * @param {unknown} value
 * @returns {string}
 */
export function stringify(value) {
  const parts = [];
  write(value, parts, 0);
  return parts.join("");
}

/** @param {unknown} v @param {string[]} out @param {number} depth */
function write(v, out, depth) {
  if (depth > MAX_DEPTH) throw new TypeError(`nesting deeper than ${MAX_DEPTH}`);
  switch (typeof v) {
    case "string":
      out.push(quote(v));
      return;
    case "number":
      out.push(formatNumber(v));
      return;
    case "bigint":
      out.push(v.toString());
      return;
    case "boolean":
      out.push(v ? "true" : "false");
      return;
    case "undefined":
      out.push("null");
      return;
    case "object":
      break;
    default:
      throw new TypeError(`cannot encode a ${typeof v} as JSON`);
  }
  if (v === null) {
    out.push("null");
  } else if (v instanceof Float) {
    out.push(formatNumber(v.value, true));
  } else if (Array.isArray(v)) {
    out.push("[");
    v.forEach((x, i) => {
      if (i) out.push(",");
      write(x, out, depth + 1);
    });
    out.push("]");
  } else if (typeof (/** @type {any} */ (v).toJSON) === "function") {
    write(/** @type {any} */ (v).toJSON(), out, depth);
  } else {
    out.push("{");
    let first = true;
    for (const [k, x] of Object.entries(v)) {
      if (x === undefined) continue;
      if (!first) out.push(",");
      first = false;
      out.push(quote(k), ":");
      write(x, out, depth + 1);
    }
    out.push("}");
  }
}

/** @param {string} s */
function quote(s) {
  // JSON.stringify escapes exactly what serde_json escapes (", \, control characters as
  // \b \f \n \r \t or \u00xx) except lone surrogates, which serde_json cannot hold anyway.
  return JSON.stringify(s);
}

/**
 * A number as Rust prints it: integers as digits, other values as an f64 (shortest digits
 * that round-trip; plain notation for decimal exponents from -5 to 16, else `1.5e-7`).
 * @param {number} n
 * @param {boolean} [asFloat] print an integral value as an f64 too (`3.0`)
 */
export function formatNumber(n, asFloat = false) {
  if (!Number.isFinite(n)) return "null";
  if (n === 0 && asFloat) return Object.is(n, -0) ? "-0.0" : "0.0";
  if (Number.isInteger(n) && Math.abs(n) < 1e17 && !asFloat) return Object.is(n, -0) ? "-0.0" : String(n);
  const [mant, expText] = Math.abs(n).toExponential().split("e");
  const digits = mant.replace(".", "");
  const kk = Number(expText) + 1; // where the decimal point goes, from the left of `digits`
  const sign = n < 0 ? "-" : "";
  let body;
  if (kk > 0 && kk <= 16) {
    body = digits.length <= kk ? digits + "0".repeat(kk - digits.length) + ".0" : `${digits.slice(0, kk)}.${digits.slice(kk)}`;
  } else if (kk > -5 && kk <= 0) {
    body = `0.${"0".repeat(-kk)}${digits}`;
  } else {
    body = digits.length === 1 ? `${digits}e${kk - 1}` : `${digits[0]}.${digits.slice(1)}e${kk - 1}`;
  }
  return sign + body;
}
