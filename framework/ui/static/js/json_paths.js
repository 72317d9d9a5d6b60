// Where each value of a JSON text is, by the path the API names it in a 422
// (`/container/docker/image`, `/constraints(0)`, `/apps(1)/cpus`, `/` for the
// whole document): so the editor can put each error beside its line.

(function (ui) {
  "use strict";

  class JsonSyntaxError extends Error {
    constructor(message, offset) {
      super(message);
      this.offset = offset;
    }
  }

  // Map path -> offset of the value (of its key, for an object member).
  function locate(text) {
    const places = new Map();
    let i = 0;
    const space = () => { while (i < text.length && " \t\r\n".includes(text[i])) i += 1; };
    const fail = (what) => { throw new JsonSyntaxError(what, i); };
    const child = (path, key) => `${path === "/" ? "" : path}/${key}`;
    const index = (path, n) => `${path}(${n})`;

    function string() {
      if (text[i] !== '"') fail("expected a string");
      const start = i;
      i += 1;
      while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
      if (i >= text.length) fail("unterminated string");
      i += 1;
      return JSON.parse(text.slice(start, i));
    }

    function value(path, at) {
      space();
      if (!places.has(path)) places.set(path, at === undefined ? i : at);
      const c = text[i];
      if (c === "{") {
        i += 1;
        space();
        if (text[i] === "}") { i += 1; return; }
        for (;;) {
          space();
          const keyAt = i;
          const key = string();
          space();
          if (text[i] !== ":") fail("expected ':'");
          i += 1;
          value(child(path, key), keyAt);
          space();
          if (text[i] === ",") { i += 1; continue; }
          if (text[i] === "}") { i += 1; return; }
          fail("expected ',' or '}'");
        }
      } else if (c === "[") {
        i += 1;
        space();
        if (text[i] === "]") { i += 1; return; }
        for (let n = 0; ; n += 1) {
          value(index(path, n));
          space();
          if (text[i] === ",") { i += 1; continue; }
          if (text[i] === "]") { i += 1; return; }
          fail("expected ',' or ']'");
        }
      } else if (c === '"') {
        string();
      } else {
        const match = /^(?:-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)/.exec(text.slice(i, i + 64));
        if (!match) fail("unexpected character");
        i += match[0].length;
      }
    }

    value("/");
    space();
    if (i < text.length) fail("unexpected text after the JSON value");
    return places;
  }

  function lineOf(text, offset) {
    let line = 1;
    for (let k = 0; k < offset && k < text.length; k += 1) if (text[k] === "\n") line += 1;
    return line;
  }

  // The line of `path`, or of its nearest ancestor present in the text (a
  // missing field is reported where its object is).
  function lineOfPath(text, places, path) {
    let p = path || "/";
    for (;;) {
      if (places.has(p)) return lineOf(text, places.get(p));
      if (p === "/" || !p) return 1;
      const cut = Math.max(p.lastIndexOf("/"), p.lastIndexOf("("));
      p = cut <= 0 ? "/" : p.slice(0, cut);
    }
  }

  // Play JSON's codes in words (the code stays beside them).
  const WORDS = {
    "error.expected.jsnumber": "must be a number",
    "error.expected.int": "must be a whole number",
    "error.expected.jsstring": "must be a string",
    "error.expected.jsobject": "must be an object",
    "error.expected.jsarray": "must be a list",
    "error.expected.jsboolean": "must be true or false",
    "error.path.missing": "is required",
    "error.min": "is too small",
    "error.max": "is too large",
    "error.minLength": "is too short",
    "error.maxLength": "is too long",
    "error.unknown.enum.literal": "is not one of the allowed values",
  };

  function words(error) {
    return WORDS[error] ? `${WORDS[error]} (${error})` : error;
  }

  ui.jsonPaths = { JsonSyntaxError, locate, lineOf, lineOfPath, words };
})(window.MesosGpu = window.MesosGpu || {});
