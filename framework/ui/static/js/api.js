// The framework's API as the page uses it: the same credentials as any API
// client (HTTP basic, or a bearer token), kept for this browser tab only
// (sessionStorage), sent explicitly with each request. `credentials: "omit"`
// keeps the browser's own login prompt and cookies out of it.

const KEY = "mesos-gpu.authorization";
// The API's root: the page lives at <root>/ui/, so a proxy prefix carries over.
export const ROOT = new URL("../", document.baseURI);

export class ApiError extends Error {
  constructor(status, body, text) {
    super((body && body.message) || text || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

export class AuthRequired extends Error {
  constructor() { super("credentials required"); }
}

let authorization = sessionStorage.getItem(KEY);
const authListeners = [];

export function onAuthRequired(callback) { authListeners.push(callback); }

export function basic(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  return "Basic " + btoa(String.fromCharCode(...bytes));
}

export function bearer(token) { return `Bearer ${token.trim()}`; }

export function setAuthorization(value) {
  authorization = value;
  if (value) sessionStorage.setItem(KEY, value); else sessionStorage.removeItem(KEY);
}

export function hasAuthorization() { return Boolean(authorization); }

export function storedAuthorization() { return authorization; }

export function headers(extra = {}) {
  const out = { Accept: "application/json", ...extra };
  if (authorization) out.Authorization = authorization;
  return out;
}

export function url(path) { return new URL(path.replace(/^\//, ""), ROOT); }

// One call: the parsed JSON answer; ApiError for any other status (its JSON
// body kept: 422 details, 409 deployments), AuthRequired for 401.
export async function call(method, path, body, { signal } = {}) {
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

export const get = (path, options) => call("GET", path, undefined, options);

// Whether these credentials (or none) open the API: true, false (401), or an
// Error when the framework cannot be reached.
export async function tryAuthorization(value) {
  const response = await fetch(url("v2/info"), {
    headers: value ? { Accept: "application/json", Authorization: value } : { Accept: "application/json" },
    credentials: "omit", cache: "no-store",
  });
  if (response.status === 401) return false;
  if (!response.ok) throw new Error(`the framework answered HTTP ${response.status}`);
  return true;
}

export function appPath(appId) {
  return appId.split("/").map(encodeURIComponent).join("/");
}
