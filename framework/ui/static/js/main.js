// The page: sign-in when the API asks for it, the section named by the URL's
// hash (#/nodes, #/apps, #/apps/<app id>, #/jobs, #/create, #/edit/<app id>), and the
// live stream that makes the shown section read its data again when something
// it shows changed (or when the stream comes back after a loss: events were missed).

(function (ui) {
  "use strict";

  const { ApiError, AuthRequired, hasAuthorization, onAuthRequired, setAuthorization } = ui.api;
  const { notice } = ui.dialogs;
  const { h, replace } = ui.dom;
  const { EventStream } = ui.events;
  const { showLogin } = ui.login;
  const nodes = ui.nodes;
  const apps = ui.apps;
  const jobs = ui.jobs;
  const appPage = ui.appPage;
  const createPage = ui.create;

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
  let failedReads = 0;               // in a row: the next read waits RETRY_MS[failedReads - 1]
  const RETRY_MS = [1000, 2000, 4000, 8000, 15000];

  function route() {
    const hash = decodeURIComponent(location.hash.replace(/^#/, "")) || "/nodes";
    if (hash === "/nodes" || hash === "/") return ["nodes", "Nodes", () => nodes.create(main)];
    if (hash === "/apps") return ["apps", "Apps", () => apps.create(main)];
    if (hash === "/jobs") return ["jobs", "Jobs", () => jobs.create(main)];
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
      nav.hidden = false;                  // the API let us in: the sections are ours
      signOut.hidden = !hasAuthorization();
      main.dataset.loaded = String(Date.now());
      // navigation to the first data drawn (bench/ui_page_load.py reads it)
      if (!main.dataset.loadedAt) main.dataset.loadedAt = String(Math.round(performance.now()));
      if (failedReads) notice("The framework is back; the page was read again.");
      failedReads = 0;
    } catch (error) {
      const unreachable = !(error instanceof ApiError);
      if (error instanceof AuthRequired || current !== view) {
        // signing in, or the user moved on: nothing to say
      } else if (unreachable || error.status >= 500) {
        // The framework gone or failing (restarting, no leader yet, a dropped
        // connection): read again soon, backing off, rather than waiting for
        // an event or the poll; the user is told.
        const delay = RETRY_MS[Math.min(failedReads, RETRY_MS.length - 1)];
        failedReads += 1;
        notice(`Could not load: ${unreachable ? "the framework cannot be reached" : error.message}` +
          ` — trying again in ${Math.round(delay / 1000)} s.`, "error");
        clearTimeout(pending);
        pending = setTimeout(run, delay);
      } else {
        notice(`Could not load: ${error.message}`, "error");
      }
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
      signIn();
    }
  }

  const stream = new EventStream({
    onEvent(type, event) {
      if (view && view.relevant(type, event)) schedule();
    },
    onState: showLive,
  });

  // The API refused the request: ask for credentials (saying so when the
  // ones this tab had were refused), show nothing meanwhile.
  async function signIn() {
    if (signingIn) return;
    signingIn = true;
    const failed = hasAuthorization();
    setAuthorization(null);
    clearTimeout(pending);
    view = { refresh: async () => {}, relevant: () => false };
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
    stream.start();
    mount(false);
  }

  // A page out of sight holds no connection: a browser gives each host six,
  // and every open tab's stream (or a page kept in the back/forward cache)
  // would hold one of them for good. Back in sight: the stream again, and the
  // section read again (events were missed meanwhile).
  let away = false;
  function leave() {
    if (away || signingIn) return;
    away = true;
    stream.stop();
    clearInterval(poll);
    clearTimeout(pending);
  }
  function comeBack() {
    if (!away || signingIn) return;
    away = false;
    stream.start();
    if (view && view.pollMs) poll = setInterval(() => schedule(0), view.pollMs);
    schedule(0);
  }
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden") leave(); else comeBack();
  });
  window.addEventListener("pagehide", leave);
  window.addEventListener("pageshow", (event) => { if (event.persisted) comeBack(); });

  onAuthRequired(signIn);
  window.addEventListener("hashchange", () => { if (!signingIn) mount(true); });
  signOut.addEventListener("click", () => {
    setAuthorization(null);
    location.reload();
  });

  // No question first: the landing section's own read tells whether the API
  // wants credentials (a 401 brings the sign-in form), so a signed-in load
  // costs the page and its data only.
  start();
})(window.MesosGpu = window.MesosGpu || {});
