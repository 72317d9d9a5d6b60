// Apps: each app with its instances, running and healthy counts, GPUs per
// instance, GPU type constraint, status and last failure.
// Data: GET /v2/apps?embed=apps.lastTaskFailure.

(function (ui) {
  "use strict";

  const { get } = ui.api;
  const { h, plural, replace, time } = ui.dom;

  function create(main) {
    const summary = h("p", { id: "apps-summary", class: "summary" }, "Loading…");
    const filter = h("input", { id: "apps-filter", type: "search", placeholder: "id, image, GPU type",
      "aria-describedby": "apps-summary", oninput: () => draw() });
    const region = h("div", { id: "apps" });
    replace(main,
      h("div", { class: "heading" }, h("h1", {}, "Apps"),
        h("label", { class: "filter" }, h("span", {}, "Filter"), filter),
        h("a", { class: "button primary", href: "#/create" }, "Create app")),
      summary, region);
    let apps = null;

    function draw() {
      if (!apps) return;
      const needle = filter.value.trim().toLowerCase();
      const shown = apps.filter((app) => !needle || searchText(app).includes(needle));
      const gpus = apps.reduce((sum, app) => sum + (app.gpus || 0) * (app.tasksRunning || 0), 0);
      summary.textContent = `${plural(apps.length, "app")} · ${plural(gpus, "GPU")} in running tasks` +
        (needle ? ` · showing ${shown.length}` : "");
      if (!apps.length) {
        replace(region, h("p", { class: "empty" }, "No apps yet. ", h("a", { href: "#/create" }, "Create one"), "."));
        return;
      }
      replace(region, h("table", { class: "apps" },
        h("caption", { class: "visually-hidden" }, "Apps"),
        h("thead", {}, h("tr", {}, ["App", "Instances", "Healthy", "GPUs each", "GPU type", "Container",
          "Status", "Last failure"].map((title) => h("th", { scope: "col" }, title)))),
        h("tbody", {}, shown.map(row))));
    }

    return {
      async refresh() {
        apps = (await get("v2/apps?embed=apps.lastTaskFailure")).apps;
        apps.sort((a, b) => a.id.localeCompare(b.id));
        draw();
      },
      relevant: (type) => type !== "event_stream_attached" && type !== "event_stream_detached",
    };
  }

  function searchText(app) {
    return [app.id, app.cmd, containerImage(app), gpuType(app), app.container && app.container.type]
      .join(" ").toLowerCase();
  }

  function containerImage(app) {
    const container = app.container || {};
    return (container.docker && container.docker.image) || "";
  }

  // The GPU type an app asks for: its gpu_type constraint, as written.
  function gpuType(app) {
    const found = (app.constraints || []).find((c) => c[0] === "gpu_type");
    return found ? found.slice(1).join(" ") : "";
  }

  function status(app) {
    if ((app.deployments || []).length) return ["deploying", "Deploying"];
    if (app.instances === 0) return ["suspended", "Suspended"];
    if (app.tasksRunning >= app.instances) return ["running", "Running"];
    return ["waiting", "Waiting"];
  }

  function row(app) {
    const [kind, word] = status(app);
    const failure = app.lastTaskFailure;
    return h("tr", { dataset: { app: app.id } },
      h("th", { scope: "row", "data-label": "App" },
        h("a", { href: `#/apps${app.id}`, dataset: { key: `app-${app.id}` } }, app.id)),
      h("td", { "data-label": "Instances" }, `${app.tasksRunning} / ${app.instances}`,
        app.tasksStaged ? h("span", { class: "muted" }, ` (+${app.tasksStaged} staging)`) : null),
      h("td", { "data-label": "Healthy" }, app.healthChecks && app.healthChecks.length
        ? `${app.tasksHealthy} / ${app.tasksRunning}` : "—"),
      h("td", { "data-label": "GPUs each" }, String(app.gpus || 0)),
      h("td", { "data-label": "GPU type" }, gpuType(app) || "any"),
      h("td", { "data-label": "Container" }, (app.container && app.container.type) || "MESOS"),
      h("td", { "data-label": "Status" }, h("span", { class: `badge ${kind}` }, word)),
      h("td", { "data-label": "Last failure", class: "failure" }, failure
        ? [h("span", { class: "error-text" }, failure.message || failure.state), " ", time(failure.timestamp)]
        : "—"));
  }

  ui.apps = { create, containerImage, gpuType, status };
})(window.MesosGpu = window.MesosGpu || {});
