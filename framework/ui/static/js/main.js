// The page: sign-in when the API asks for it, the section named by the URL's
// hash (#/nodes, #/apps, #/apps/<app id>, #/create, #/edit/<app id>), and the
// live stream that makes the shown section read its data again when something
// it shows changed (or when the stream comes back after a loss: events were missed).

import { hasAuthorization, onAuthRequired, setAuthorization, storedAuthorization, tryAuthorization } from "./api.js";
import { notice } from "./dialogs.js";
import { h, replace } from "./dom.js";
import { EventStream } from "./events.js";
import { showLogin } from "./login.js";
import * as nodes from "./nodes.js";
import * as apps from "./apps.js";
import * as appPage from "./app_page.js";
import * as createPage from "./create.js";

const main = document.getElementById("main");
const live = document.getElementById("live");
const nav = document.getElementById("nav");
const signOut = document.getElementById("sign-out");
const DEBOUNCE_MS = 250;

let view = null;
let poll = null;
let pending = null;
let running = false;
let again = false;
let signingIn = false;
let lostSince = null;

function route() {
  const hash = decodeURIComponent(location.hash.replace(/^#/, "")) || "/nodes";
  if (hash === "/nodes" || hash === "/") return ["nodes", "Nodes", () => nodes.create(main)];
  if (hash === "/apps") return ["apps", "Apps", () => apps.create(main)];
  if (hash.startsWith("/apps/")) {
    const appId = hash.slice("/apps".length);
    return ["apps", appId, () => appPage.create(main, { appId })];
  }
  if (hash === "/create") return ["create", "Create app", () => createPage.create(main)];
  if (hash.startsWith("/edit/")) {
    const editId = hash.slice("/edit".length);
    return ["apps", `Edit ${editId}`, () => createPage.create(main, { editId })];
  }
  return [null, "Not found", () => {
    replace(main, h("h1", {}, "Not found"), h("p", {}, "No such page. ", h("a", { href: "#/nodes" }, "Nodes")));
    return { refresh: async () => {}, relevant: () => false };
  }];
}

function mount(focus) {
  clearInterval(poll);
  const [section, title, make] = route();
  document.title = `${title} · mesos-gpu`;
  for (const link of nav.querySelectorAll("a")) {
    if (link.dataset.section === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  view = make();
  if (view.pollMs) poll = setInterval(() => schedule(0), view.pollMs);
  schedule(0);
  if (focus) main.focus({ preventScroll: true });
}

// Read the shown section's data again, soon; bursts of events make one read.
function schedule(delay = DEBOUNCE_MS) {
  clearTimeout(pending);
  pending = setTimeout(run, delay);
}

async function run() {
  if (running) { again = true; return; }
  running = true;
  const current = view;
  try {
    await current.refresh();
    main.dataset.loaded = String(Date.now());
  } catch (error) {
    if (error.name !== "AuthRequired" && current === view) notice(`Could not load: ${error.message}`, "error");
  } finally {
    running = false;
    if (again) { again = false; schedule(0); }
  }
}

function showLive(state, detail) {
  live.dataset.state = state;
  if (state === "live") {
    live.textContent = "● Live";
    live.title = "Following /v2/events";
    if (lostSince) {
      notice("Live updates are back; the page was read again.");
      lostSince = null;
      schedule(0);
    }
  } else if (state === "connecting") {
    live.textContent = "Connecting…";
  } else if (state === "retrying") {
    lostSince = lostSince || Date.now();
    live.textContent = detail.connecting
      ? `Live updates lost: reconnecting (attempt ${detail.attempt + 1})…`
      : `Live updates lost (${detail.reason}): reconnecting in ${Math.round(detail.delay / 1000)} s…`;
    live.title = "The data shown may be out of date until the stream is back";
  } else if (state === "unauthorized") {
    live.textContent = "Not signed in";
  }
}

const stream = new EventStream({
  onEvent(type, event) {
    if (view && view.relevant(type, event)) schedule();
  },
  onState: showLive,
});

async function signIn(failed) {
  if (signingIn) return;
  signingIn = true;
  stream.stop();
  clearInterval(poll);
  nav.hidden = true;
  signOut.hidden = true;
  showLive("unauthorized", {});
  document.title = "Sign in · mesos-gpu";
  await showLogin(main, { failed });
  signingIn = false;
  start();
}

function start() {
  nav.hidden = false;
  signOut.hidden = !hasAuthorization();
  stream.start();
  mount(false);
}

onAuthRequired(() => signIn(true));
window.addEventListener("hashchange", () => { if (!signingIn) mount(true); });
signOut.addEventListener("click", () => {
  setAuthorization(null);
  location.reload();
});

async function boot() {
  try {
    if (await tryAuthorization(storedAuthorization())) { start(); return; }
  } catch (error) {
    replace(main, h("h1", {}, "The framework cannot be reached"), h("p", {}, error.message),
      h("p", {}, h("button", { type: "button", onclick: () => location.reload() }, "Try again")));
    return;
  }
  const hadOne = hasAuthorization();
  setAuthorization(null);
  signIn(hadOne);
}

boot();
