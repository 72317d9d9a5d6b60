// The live stream: GET /v2/events (server-sent events) read with fetch, so it
// carries the API's credentials (EventSource cannot send a header). A stream
// that ends, fails or stays silent past the server's keep-alive is dropped and
// opened again after 1, 2, 4 ... 15 s; the page says which it is doing.

(function (ui) {
  "use strict";

  const { AuthRequired, headers, url } = ui.api;

  const SILENCE_MS = 40000;          // the server writes a comment every 15 s
  const RETRY_MS = [1000, 2000, 4000, 8000, 15000];

  class EventStream {
    constructor({ onEvent, onState }) {
      this.onEvent = onEvent;
      this.onState = onState;        // ("connecting" | "live" | "retrying" | "unauthorized", detail)
      this.attempt = 0;
      this.stopped = true;
      this.controller = null;
      this.timer = null;
      this.watchdog = null;
    }

    start() {
      this.stopped = false;
      this.attempt = 0;
      this._connect();
    }

    stop() {
      this.stopped = true;
      clearTimeout(this.timer);
      clearTimeout(this.watchdog);
      if (this.controller) this.controller.abort();
    }

    async _connect() {
      if (this.stopped) return;
      this.onState(this.attempt ? "retrying" : "connecting", { attempt: this.attempt, connecting: true });
      const controller = new AbortController();
      this.controller = controller;
      let reason = "the stream ended";
      try {
        const response = await fetch(url("v2/events"), {
          headers: headers({ Accept: "text/event-stream" }),
          credentials: "omit", cache: "no-store", signal: controller.signal,
        });
        if (response.status === 401) throw new AuthRequired();
        if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
        this.attempt = 0;
        this.onState("live", {});
        await this._read(response.body, controller);
      } catch (error) {
        if (error instanceof AuthRequired) {
          this.onState("unauthorized", {});
          return;
        }
        reason = controller.signal.aborted && !this.stopped ? "no data for 40 s" : error.message;
      } finally {
        clearTimeout(this.watchdog);
      }
      if (this.stopped) return;
      const delay = RETRY_MS[Math.min(this.attempt, RETRY_MS.length - 1)];
      this.attempt += 1;
      this.onState("retrying", { attempt: this.attempt, delay, reason });
      this.timer = setTimeout(() => this._connect(), delay);
    }

    async _read(body, controller) {
      const reader = body.pipeThrough(new TextDecoderStream()).getReader();
      const arm = () => {
        clearTimeout(this.watchdog);
        this.watchdog = setTimeout(() => controller.abort(), SILENCE_MS);
      };
      arm();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        arm();
        buffer += value.replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          this._frame(frame);
        }
      }
    }

    _frame(frame) {
      let type = "message";
      const data = [];
      for (const line of frame.split("\n")) {
        if (!line || line.startsWith(":")) continue;      // keep-alive comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") type = value;
        else if (field === "data") data.push(value);
      }
      if (!data.length) return;
      let payload = null;
      try { payload = JSON.parse(data.join("\n")); } catch { return; }
      this.onEvent(type, payload);
    }
  }

  ui.events = { EventStream };
})(window.MesosGpu = window.MesosGpu || {});
