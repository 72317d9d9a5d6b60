// The framework's API as the page uses it: the same credentials as any API
// client (HTTP basic, or a bearer token), kept for this browser tab only
// (sessionStorage), sent explicitly with each request. `credentials: "omit"`
// keeps the browser's own login prompt and cookies out of it.
//
// A page opened as http://user:password@host/ui/ has those credentials in its
// own URL, and fetch refuses any URL that carries some ("Request cannot be
// constructed from a URL that includes credentials"), a relative one too: it
// takes them from the page's. So each request's URL is made of the page's
// origin and a path alone, and credentials found in the page's URL sign the tab
// in (wrong ones get the sign-in form, as any).

(function (ui) {
  "use strict";

  const KEY = "mesos-gpu.authorization";
  // The API's root, a path: the page lives at <root>/ui/, so a proxy prefix carries over.
  const PAGE = new URL(document.baseURI);
  const ROOT = new URL("../", PAGE).pathname;

  class ApiError extends Error {
    constructor(status, body, text) {
      super((body && body.message) || text || `HTTP ${status}`);
      this.status = status;
      this.body = body;
    }
  }

  class AuthRequired extends Error {
    constructor() { super("credentials required"); }
  }

  let authorization = sessionStorage.getItem(KEY);
  const authListeners = [];

  function onAuthRequired(callback) { authListeners.push(callback); }

  function basic(user, password) {
    const bytes = new TextEncoder().encode(`${user}:${password}`);
    return "Basic " + btoa(String.fromCharCode(...bytes));
  }

  function bearer(token) { return `Bearer ${token.trim()}`; }

  function setAuthorization(value) {
    authorization = value;
    if (value) sessionStorage.setItem(KEY, value); else sessionStorage.removeItem(KEY);
  }

  if (!authorization && PAGE.username) {
    setAuthorization(basic(decodeURIComponent(PAGE.username), decodeURIComponent(PAGE.password)));
  }

  function hasAuthorization() { return Boolean(authorization); }

  function storedAuthorization() { return authorization; }

  function headers(extra = {}) {
    const out = { Accept: "application/json", ...extra };
    if (authorization) out.Authorization = authorization;
    return out;
  }

  function url(path) { return new URL(ROOT + path.replace(/^\//, ""), location.origin); }

  // One call: the parsed JSON answer; ApiError for any other status (its JSON
  // body kept: 422 details, 409 deployments), AuthRequired for 401.
  async function call(method, path, body, { signal } = {}) {
    const init = { method, headers: headers(), credentials: "omit", cache: "no-store", signal };
    if (body !== undefined) {
      init.body = typeof body === "string" ? body : JSON.stringify(body);
      init.headers["Content-Type"] = "application/json";
    }
    const response = await fetch(url(path), init);
    const text = await response.text();
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch { json = null; }
    if (response.status === 401) {
      authListeners.forEach((callback) => callback());
      throw new AuthRequired();
    }
    if (!response.ok) throw new ApiError(response.status, json, text);
    return json;
  }

  const get = (path, options) => call("GET", path, undefined, options);

  // Whether these credentials (or none) open the API: true, false (401), or an
  // Error when the framework cannot be reached.
  async function tryAuthorization(value) {
    const response = await fetch(url("v2/info"), {
      headers: value ? { Accept: "application/json", Authorization: value } : { Accept: "application/json" },
      credentials: "omit", cache: "no-store",
    });
    if (response.status === 401) return false;
    if (!response.ok) throw new Error(`the framework answered HTTP ${response.status}`);
    return true;
  }

  function appPath(appId) {
    return appId.split("/").map(encodeURIComponent).join("/");
  }

  ui.api = { ROOT, ApiError, AuthRequired, onAuthRequired, basic, bearer, setAuthorization, hasAuthorization, storedAuthorization, headers, url, call, get, tryAuthorization, appPath };
})(window.MesosGpu = window.MesosGpu || {});
