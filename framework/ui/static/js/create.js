// Creating an app: a small form for the common GPU case (image, command,
// GPUs, GPU type, container type) and a JSON editor for everything else. The
// API's 422 names each problem by path: the form shows it under its field,
// the editor beside the line of the JSON it names. `#/edit/<app>` opens the
// editor on an existing app's definition (PUT).

(function (ui) {
  "use strict";

  const { ApiError, appPath, call, get } = ui.api;
  const { confirmAction, notice } = ui.dialogs;
  const { h, replace } = ui.dom;
  const { definition } = ui.appPage;
  const { JsonSyntaxError, lineOf, lineOfPath, locate, words } = ui.jsonPaths;

  const TEMPLATE = {
    id: "/my-gpu-app",
    cmd: "nvidia-smi && sleep 3600",
    cpus: 1,
    mem: 1024,
    gpus: 1,
    instances: 1,
    container: { type: "DOCKER", docker: { image: "nvidia/cuda:12.2.0-base-ubuntu22.04" } },
  };

  // Which form field a 422 path belongs to (the rest are listed above the buttons).
  const FIELD_OF = [
    [/^\/id$/, "id"], [/^\/container\/docker\/image$/, "image"], [/^\/container(\/type)?$/, "type"],
    [/^\/container\/docker$/, "image"], [/^\/(cmd|args)$/, "cmd"], [/^\/gpus$/, "gpus"],
    [/^\/constraints/, "gpuType"], [/^\/cpus$/, "cpus"], [/^\/mem$/, "mem"], [/^\/instances$/, "instances"],
  ];

  function create(main, { editId } = {}) {
    const formPanel = h("div", { id: "panel-form", role: "tabpanel", "aria-labelledby": "tab-form" });
    const jsonPanel = h("div", { id: "panel-json", role: "tabpanel", "aria-labelledby": "tab-json" });
    const editor = jsonEditor(editId);
    jsonPanel.append(editor.element);
    const tabs = [
      h("button", { type: "button", role: "tab", id: "tab-form", "aria-controls": "panel-form" }, "GPU app form"),
      h("button", { type: "button", role: "tab", id: "tab-json", "aria-controls": "panel-json" }, "JSON editor"),
    ];
    const select = (n, focus = false) => {
      tabs.forEach((tab, k) => {
        tab.setAttribute("aria-selected", String(k === n));
        tab.tabIndex = k === n ? 0 : -1;
      });
      formPanel.hidden = n !== 0;
      jsonPanel.hidden = n !== 1;
      if (focus) tabs[n].focus();
    };
    tabs.forEach((tab, n) => {
      tab.addEventListener("click", () => select(n));
      tab.addEventListener("keydown", (event) => {
        if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
          event.preventDefault();
          select((n + (event.key === "ArrowRight" ? 1 : tabs.length - 1)) % tabs.length, true);
        }
      });
    });
    if (editId) {
      replace(main, h("p", { class: "crumbs" }, h("a", { href: "#/apps" }, "Apps"), " / ",
        h("a", { href: `#/apps${editId}` }, editId), " /"),
      h("h1", {}, `Edit ${editId}`), jsonPanel);
    } else {
      formPanel.append(gpuForm((body) => { editor.set(body); select(1, true); }));
      replace(main, h("h1", {}, "Create an app"),
        h("div", { role: "tablist", "aria-label": "How to write the app", class: "tabs" }, tabs),
        formPanel, jsonPanel);
      select(0);
    }
    return {
      async refresh() {
        if (editId && !editor.loaded) await editor.load();
      },
      relevant: () => false,
    };
  }

  function field(id, label, input, hint) {
    input.id = `field-${id}`;
    const error = h("p", { id: `error-${id}`, class: "field-error", role: "alert", hidden: true });
    input.setAttribute("aria-describedby", `error-${id}${hint ? ` hint-${id}` : ""}`);
    return h("div", { class: `field${input.tagName === "TEXTAREA" ? " wide" : ""}`, dataset: { field: id } },
      h("label", { for: input.id }, label), input,
      hint ? h("p", { id: `hint-${id}`, class: "hint" }, hint) : null, error);
  }

  function gpuForm(showJson) {
    const inputs = {
      id: h("input", { required: true, placeholder: "/team/inference", autocomplete: "off", spellcheck: "false" }),
      type: h("select", {}, h("option", { value: "DOCKER" }, "Docker"), h("option", { value: "MESOS" }, "Mesos (unified)")),
      image: h("input", { placeholder: "registry.local:5000/cv/tf:1.12", autocomplete: "off", spellcheck: "false" }),
      cmd: h("textarea", { rows: "3", spellcheck: "false", placeholder: "python3 serve.py" }),
      // a whole number, or a share of one shared GPU (0.25)
      gpus: h("input", { type: "number", min: "0", step: "any", value: "1" }),
      gpuType: h("input", { list: "gpu-types", placeholder: "any", autocomplete: "off", spellcheck: "false" }),
      cpus: h("input", { type: "number", min: "0", step: "0.1", value: "1" }),
      mem: h("input", { type: "number", min: "0", step: "1", value: "1024" }),
      instances: h("input", { type: "number", min: "0", step: "1", value: "1" }),
    };
    const types = h("datalist", { id: "gpu-types" });
    get("v1/nodes").then((data) => {
      const seen = [...new Set(data.nodes.map((n) => n.gpuType).filter(Boolean))].sort();
      types.replaceChildren(...seen.map((t) => h("option", { value: t })));
    }).catch(() => {});
    const others = h("ul", { id: "form-errors", class: "errors", hidden: true });
    const submit = h("button", { type: "submit", class: "primary", id: "form-submit" }, "Create");

    function body() {
      const out = { id: inputs.id.value.trim() };
      const cmd = inputs.cmd.value.trim();
      if (cmd) out.cmd = cmd;
      out.cpus = numberOr(inputs.cpus.value);
      out.mem = numberOr(inputs.mem.value);
      out.gpus = numberOr(inputs.gpus.value);
      out.instances = numberOr(inputs.instances.value);
      const gpuType = inputs.gpuType.value.trim();
      if (gpuType) out.constraints = [["gpu_type", "IS", gpuType]];
      const image = inputs.image.value.trim();
      out.container = { type: inputs.type.value };
      if (image || inputs.type.value === "DOCKER") out.container.docker = { image };
      return out;
    }

    function clear() {
      for (const name of Object.keys(inputs)) {
        const error = document.getElementById(`error-${name}`);
        error.hidden = true;
        error.textContent = "";
        inputs[name].removeAttribute("aria-invalid");
      }
      others.hidden = true;
      others.replaceChildren();
    }

    function show(details) {
      let first = null;
      for (const detail of details) {
        const match = FIELD_OF.find(([pattern]) => pattern.test(detail.path));
        const text = detail.errors.map(words).join("; ");
        if (match) {
          const error = document.getElementById(`error-${match[1]}`);
          error.textContent = error.textContent ? `${error.textContent}; ${text}` : text;
          error.hidden = false;
          inputs[match[1]].setAttribute("aria-invalid", "true");
          first = first || inputs[match[1]];
        } else {
          others.append(h("li", {}, h("code", {}, detail.path), ` ${text}`));
          others.hidden = false;
        }
      }
      (first || submit).focus();
    }

    return h("form", { id: "gpu-form", class: "form", novalidate: true,
      onsubmit: async (event) => {
        event.preventDefault();
        clear();
        submit.disabled = true;
        try {
          const app = body();
          await call("POST", "v2/apps", app);
          notice(`Created ${app.id}.`);
          location.hash = `#/apps${app.id.startsWith("/") ? app.id : `/${app.id}`}`;
        } catch (error) {
          if (error instanceof ApiError && error.body && error.body.details) show(error.body.details);
          else {
            others.replaceChildren(h("li", {}, error.message));
            others.hidden = false;
            submit.focus();
          }
        } finally {
          submit.disabled = false;
        }
      } },
      h("div", { class: "grid" },
        field("id", "App ID", inputs.id),
        field("type", "Container", inputs.type),
        field("image", "Image", inputs.image, "Docker image; optional for a Mesos container"),
        field("cmd", "Command", inputs.cmd),
        field("gpus", "GPUs per instance", inputs.gpus),
        field("gpuType", "GPU type", inputs.gpuType, "an agent's gpu_type, e.g. tesla_v100; empty: any"),
        field("instances", "Instances", inputs.instances),
        field("cpus", "CPUs", inputs.cpus),
        field("mem", "Memory (MiB)", inputs.mem)),
      types, others,
      h("div", { class: "buttons" }, submit,
        h("button", { type: "button", id: "form-as-json", onclick: () => showJson(body()) }, "Edit as JSON")));
  }

  function numberOr(text) {
    const value = Number(text);
    return text.trim() === "" || Number.isNaN(value) ? text : value;
  }

  function jsonEditor(editId) {
    const area = h("textarea", { id: "json-text", class: "code", wrap: "off", spellcheck: "false",
      "aria-label": "App definition (JSON)", "aria-describedby": "json-errors", rows: "22" });
    const gutter = h("div", { class: "gutter", "aria-hidden": "true" });
    // the problems again, each on the level of its line, right of the text
    const notes = h("div", { class: "notes", "aria-hidden": "true" });
    const errors = h("ul", { id: "json-errors", class: "errors", "aria-live": "polite" });
    const submit = h("button", { type: "submit", class: "primary", id: "json-submit" }, editId ? "Save" : "Create");
    let marks = new Map();                       // line -> messages

    function drawGutter() {
      const lines = area.value.split("\n").length;
      gutter.replaceChildren(...Array.from({ length: lines }, (_, k) => {
        const messages = marks.get(k + 1);
        return h("div", { class: messages ? "bad" : "", title: messages ? messages.join("\n") : null },
          messages ? `● ${k + 1}` : String(k + 1));
      }));
      notes.replaceChildren(...Array.from({ length: lines }, (_, k) => {
        const messages = marks.get(k + 1);
        return h("div", { class: messages ? "bad" : "" }, messages ? messages.join("; ") : "");
      }));
      gutter.scrollTop = notes.scrollTop = area.scrollTop;
    }

    function goTo(line) {
      const lines = area.value.split("\n");
      const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
      area.focus();
      area.setSelectionRange(start, start + (lines[line - 1] || "").length);
      const lineHeight = area.scrollHeight / Math.max(1, lines.length);
      area.scrollTop = Math.max(0, (line - 3) * lineHeight);
    }

    function show(items) {                     // [{line, path, text}]
      marks = new Map();
      for (const item of items) marks.set(item.line, [...(marks.get(item.line) || []), `${item.path}: ${item.text}`]);
      errors.replaceChildren(...items.map((item) => h("li", { dataset: { path: item.path, line: String(item.line) } },
        h("button", { type: "button", class: "link", onclick: () => goTo(item.line) }, `line ${item.line}`),
        " ", h("code", {}, item.path), ` ${item.text}`)));
      drawGutter();
    }

    area.addEventListener("input", () => { if (marks.size) { marks = new Map(); } drawGutter(); });
    area.addEventListener("scroll", () => { gutter.scrollTop = notes.scrollTop = area.scrollTop; });

    const editorApi = {
      loaded: false,
      set(value) {
        area.value = JSON.stringify(value, null, 2);
        show([]);
      },
      async load() {
        const { app } = await get(`v2/apps${appPath(editId)}`);
        editorApi.set(definition(app));
        editorApi.loaded = true;
      },
      element: h("form", { id: "json-form", class: "form", novalidate: true,
        onsubmit: async (event) => {
          event.preventDefault();
          const text = area.value;
          let places;
          try {
            places = locate(text);
          } catch (error) {
            if (!(error instanceof JsonSyntaxError)) throw error;
            show([{ line: lineOf(text, error.offset), path: "/", text: `not JSON: ${error.message}` }]);
            goTo(lineOf(text, error.offset));
            return;
          }
          submit.disabled = true;
          try {
            const parsed = JSON.parse(text);
            if (editId) await put(editId, text);
            else await call("POST", "v2/apps", text);
            const id = editId || (parsed && typeof parsed.id === "string" ? parsed.id : "");
            notice(editId ? `Saved ${editId}.` : `Created ${id}.`);
            location.hash = id ? `#/apps${id.startsWith("/") ? id : `/${id}`}` : "#/apps";
          } catch (error) {
            if (error instanceof ApiError && error.body && error.body.details) {
              const items = error.body.details.flatMap((d) => d.errors.map((e) => ({
                line: lineOfPath(text, places, d.path), path: d.path, text: words(e) })));
              items.sort((a, b) => a.line - b.line);
              show(items);
              if (items.length) goTo(items[0].line);
            } else if (error instanceof ApiError || error instanceof TypeError) {
              show([{ line: 1, path: "/", text: error.message }]);
            } else throw error;
          } finally {
            submit.disabled = false;
          }
        } },
        h("div", { class: "editor" }, gutter, area, notes),
        h("div", { class: "buttons" }, submit,
          editId ? null : h("button", { type: "button", id: "json-template", onclick: () => editorApi.set(TEMPLATE) }, "GPU app template")),
        h("h2", { class: "visually-hidden" }, "Problems"), errors),
    };
    if (!editId) editorApi.set(TEMPLATE);
    return editorApi;
  }

  async function put(appId, text) {
    const path = `v2/apps${appPath(appId)}`;
    try {
      await call("PUT", path, text);
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 409) throw error;
      if (!await confirmAction({ title: "A deployment is in progress", action: "Force it",
        text: `${error.message} Replace the running deployment of ${appId}?` })) throw error;
      await call("PUT", `${path}?force=true`, text);
    }
  }

  ui.create = { create };
})(window.MesosGpu = window.MesosGpu || {});
