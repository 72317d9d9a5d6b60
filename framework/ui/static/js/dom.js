// Building the page from data without ever parsing data as markup: every
// string lands in a text node or an attribute.

(function (ui) {
  "use strict";

  function h(tag, attributes = {}, ...children) {
    const element = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") element.className = value;
      else if (name === "dataset") Object.assign(element.dataset, value);
      else if (name.startsWith("on") && typeof value === "function") {
        element.addEventListener(name.slice(2), value);
      } else if (value === true) element.setAttribute(name, "");
      else element.setAttribute(name, String(value));
    }
    append(element, children);
    return element;
  }

  function append(element, children) {
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      element.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  // Replace a region's content, keeping keyboard focus (and what is being
  // typed) on the element with the same data-key: a refresh must not throw the
  // user's place away.
  function replace(region, ...children) {
    const active = document.activeElement;
    const key = active && region.contains(active) ? active.dataset.key : undefined;
    const typing = key && "value" in active && active.tagName !== "BUTTON"
      ? { value: active.value, start: active.selectionStart, end: active.selectionEnd } : null;
    region.replaceChildren();
    append(region, children);
    if (key) {
      const again = byKey(key, region);
      if (again) {
        if (typing) {
          again.value = typing.value;
          try { again.setSelectionRange(typing.start, typing.end); } catch { /* not a text field */ }
        }
        again.focus({ preventScroll: true });
      }
    }
  }

  function byKey(key, within = document) {
    return key ? within.querySelector(`[data-key="${CSS.escape(key)}"]`) : null;
  }

  function time(iso) {
    if (!iso) return "—";
    const when = new Date(iso);
    return h("time", { datetime: iso, title: when.toLocaleString() }, ago(when));
  }

  function ago(when) {
    const seconds = Math.round((Date.now() - when.getTime()) / 1000);
    if (seconds < 5) return "just now";
    if (seconds < 90) return `${seconds} s ago`;
    if (seconds < 90 * 60) return `${Math.round(seconds / 60)} min ago`;
    if (seconds < 36 * 3600) return `${Math.round(seconds / 3600)} h ago`;
    return when.toLocaleDateString();
  }

  // "GPU-8a3b2c1d-…-4f2e": the first group and the last four digits, which
  // tell a node's GPUs apart (the whole UUID is in the title).
  function shortUuid(uuid) {
    if (!uuid || uuid.length <= 20) return uuid;
    const first = uuid.indexOf("-", uuid.indexOf("-") + 1);
    return `${uuid.slice(0, first > 0 ? first : 12)}…${uuid.slice(-4)}`;
  }

  function plural(count, word, many = `${word}s`) {
    return `${count} ${count === 1 ? word : many}`;
  }

  ui.dom = { h, replace, byKey, time, ago, shortUuid, plural };
})(window.MesosGpu = window.MesosGpu || {});
