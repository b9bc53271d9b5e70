// Conveyor's dashboard: plain JavaScript over the REST API (docs/dashboard.md).
"use strict";

const main = document.getElementById("main");
const statusLine = document.getElementById("status");
let timer = null;
let round = 0; // the page whose refreshes may go on: each route starts a new round

// Run `refresh` again `ms` after it ends, or twenty times as long as it took if that is
// longer: counting a deep queue can take its database a third of a second, and the page then
// asks every 6 seconds instead of every 2.
function every(refresh, ms) {
  const mine = round;
  const again = async () => {
    const started = performance.now();
    await refresh();
    if (mine === round) timer = setTimeout(again, Math.max(ms, 20 * (performance.now() - started)));
  };
  timer = setTimeout(again, ms);
}

// -- the REST API, with the bearer token kept in this tab ------------------------------------

async function api(method, path, body) {
  const headers = authHeaders();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 401) {
    askToken(sessionStorage.getItem("conveyor-token") ? "That token was refused." : "");
    throw new Error("the server needs its token");
  }
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  const said = typeof data === "string" ? data : data && data.error;  // Dynamiq's routes say a string
  if (!res.ok) throw new Error(said || res.statusText);
  return data;
}

function askToken(message) {
  const dialog = document.getElementById("login");
  document.getElementById("login-error").textContent = message;
  if (!dialog.open) dialog.showModal();
}

document.getElementById("login-form").addEventListener("submit", () => {
  sessionStorage.setItem("conveyor-token", document.getElementById("token").value);
  route();
});

// -- helpers ----------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children.flat(Infinity)) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const q = (name) => encodeURIComponent(name);
const age = (seconds) => seconds == null ? "-" :
  seconds < 120 ? `${Math.round(seconds)} s` :
  seconds < 7200 ? `${Math.round(seconds / 60)} min` : `${(seconds / 3600).toFixed(1)} h`;
const when = (epoch) => epoch ? new Date(epoch * 1000).toLocaleString() : "-";

function show(message, isError) {
  statusLine.textContent = message;
  statusLine.className = "status" + (isError ? " error" : "");
}

function pretty(body) {
  try { return JSON.stringify(JSON.parse(body), null, 2); } catch { return body; }
}

function sparkline(points) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 120 24");
  if (points.length > 1) {
    const t0 = points[0][0], t1 = points[points.length - 1][0];
    const top = Math.max(1, ...points.map((p) => p[1]));
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", points.map(([t, v]) =>
      `${(120 * (t - t0) / Math.max(1, t1 - t0)).toFixed(1)},${(23 - 22 * v / top).toFixed(1)}`
    ).join(" "));
    svg.append(line);
  }
  return svg;
}

// A line chart of one or more [time, value] series over the same hour, with its scale.
function chart(title, series, id) {
  const ns = "http://www.w3.org/2000/svg";
  const W = 520, H = 120, L = 40;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("id", id);
  const all = series.flatMap(([, points]) => points);
  const t0 = Math.min(...all.map((p) => p[0]), Date.now() / 1000 - 3600);
  const t1 = Math.max(...all.map((p) => p[0]), t0 + 1);
  const top = Math.max(1, ...all.map((p) => p[1]));
  const text = (x, y, words, anchor = "end") => {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("text-anchor", anchor);
    t.textContent = words;
    return t;
  };
  svg.append(text(L - 4, 10, top.toFixed(top < 10 ? 1 : 0)), text(L - 4, H - 4, "0"));
  series.forEach(([label, points], i) => {
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("class", `series s${i}`);
    line.setAttribute("data-series", label);
    line.setAttribute("points", points.map(([t, v]) =>
      `${(L + (W - L) * (t - t0) / (t1 - t0)).toFixed(1)},${(H - 8 - (H - 16) * v / top).toFixed(1)}`).join(" "));
    const legend = text(W - 4 - 90 * (series.length - 1 - i), 12, label);
    legend.setAttribute("class", `legend s${i}`);
    svg.append(line, legend);
  });
  return el("figure", { class: "chart" }, el("figcaption", {}, title), svg);
}

function guarded(fn) {
  return async (...args) => {
    try { await fn(...args); } catch (err) { show(err.message, true); }
  };
}

// -- overview ---------------------------------------------------------------------------------

// what the overview shows, kept across its refreshes: the filter, the sort
const view = { filter: "", sort: "queue", descending: false };
const COLUMNS = [
  ["queue", "queue"], ["ready", "ready"], ["delayed", "delayed"], ["in_flight", "in flight"],
  ["dead_now", "in DLQ now"], ["oldest_age", "oldest"], ["rate", "sent/s"],
  ["received_rate", "received/s"], ["deleted_rate", "deleted/s"],
];
const rate = (value) => Number(value || 0).toFixed(1);

function sorted(queues) {
  const key = view.sort;
  const value = (s) => (s[key] === null || s[key] === undefined ? -1 : s[key]);
  const out = queues.filter((s) => s.queue.toLowerCase().includes(view.filter.toLowerCase()));
  out.sort((a, b) => {
    const x = value(a), y = value(b);
    const order = typeof x === "string" ? x.localeCompare(y) : x - y;
    return view.descending ? -order : order;
  });
  return out;
}

async function overview() {
  const summary = el("div", { id: "summary", class: "summary" });
  const body = el("tbody");
  const head = el("tr");
  const table = el("table", { id: "queues" }, el("thead", {}, head), body);
  let latest = null;

  function rows() {
    if (!latest) return;
    const shown = sorted(latest.queues);
    body.replaceChildren(...(shown.length ? shown.map((s) => el("tr", { "data-queue": s.queue },
      el("td", {}, el("a", { href: `#/queue/${q(s.queue)}` }, s.queue),
        s.is_dead_letter_queue ? el("span", { class: "tag" }, "DLQ") : ""),
      el("td", { class: "num ready" }, s.ready),
      el("td", { class: "num delayed" }, s.delayed),
      el("td", { class: "num in-flight" }, s.in_flight),
      el("td", { class: "num dead", title: s.dead_letter_queue ? `in ${s.dead_letter_queue} now` : "no dead-letter queue" },
        s.dead_now === null ? "-" : s.dead_now),
      el("td", { class: "num" }, age(s.oldest_age)),
      el("td", { class: "num" }, rate(s.rate)),
      el("td", { class: "num" }, rate(s.received_rate)),
      el("td", { class: "num" }, rate(s.deleted_rate)),
      el("td", {}, sparkline(s.history.depth)),
      el("td", {}, sparkline(s.history.rate)),
    )) : [el("tr", {}, el("td", { colspan: 11, class: "muted" }, latest.queues.length ?
      "No queue's name holds that." :
      "No queues yet: create one here, with `conveyor queue create NAME` or any SQS client."))]));
    head.replaceChildren(...COLUMNS.map(([key, label]) => el("th", {
      class: "sortable" + (view.sort === key ? (view.descending ? " down" : " up") : ""),
      "data-sort": key,
      onclick: () => {
        view.descending = view.sort === key ? !view.descending : key !== "queue";
        view.sort = key;
        rows();
      },
    }, label)), el("th", {}, "depth (1 h)"), el("th", {}, "sent/s (1 h)"));
  }

  async function refresh() {
    latest = await api("GET", "/ui/api/overview");
    const s = latest.server;
    const c = s.connections || {};
    summary.replaceChildren(...[
      ["queues", s.queues], ["ready", s.ready], ["in flight", s.in_flight],
      ["in dead-letter queues", s.dead], ["sent/s", rate(s.sent_rate)],
      ["received/s", rate(s.received_rate)], ["deleted/s", rate(s.deleted_rate)],
      ["connections", c.push === undefined ? c.http ?? "-" : `${c.http} HTTP, ${c.push} push`],
    ].map(([label, value]) => el("div", { class: "stat", "data-stat": label },
      el("span", { class: "value" }, value), el("span", { class: "muted" }, label))));
    rows();
    show(`updated ${new Date().toLocaleTimeString()}`);
  }

  const filter = el("input", { id: "queue-filter", placeholder: "filter by name", value: view.filter,
    oninput: (e) => { view.filter = e.target.value; rows(); } });
  main.replaceChildren(
    el("h1", {}, "Queues"),
    summary,
    el("div", { class: "row" }, filter,
      el("button", { id: "new-queue", class: "primary", onclick: () => newQueueForm.toggleAttribute("hidden") },
        "new queue")),
    newQueue(refresh),
    table,
  );
  const newQueueForm = document.getElementById("new-queue-form");
  await refresh();
  return refresh;
}

function newQueue(done) {
  const input = (id, attrs = {}) => el("input", { id, size: 10, ...attrs });
  const form = el("div", { class: "card", id: "new-queue-form", hidden: "" },
    el("h2", {}, "new queue"),
    el("div", { class: "grid" },
      el("label", { for: "nq-name" }, "name"), input("nq-name", { size: 30, placeholder: "orders (FIFO: orders.fifo)" }),
      el("label", { for: "nq-fifo" }, "FIFO"), el("input", { id: "nq-fifo", type: "checkbox" }),
      el("label", { for: "nq-cbd" }, "FIFO: de-duplicate by body"), el("input", { id: "nq-cbd", type: "checkbox" }),
      el("label", { for: "nq-visibility" }, "visibility timeout (s)"), input("nq-visibility", { placeholder: "30" }),
      el("label", { for: "nq-delay" }, "delay (s)"), input("nq-delay", { placeholder: "0" }),
      el("label", { for: "nq-retention" }, "retention (s)"), input("nq-retention", { placeholder: "345600" }),
      el("label", { for: "nq-dlq" }, "dead-letter queue, max receives"),
      el("span", {}, input("nq-dlq", { size: 20 }), " ", input("nq-max", { size: 5, placeholder: "5" })),
    ),
    el("div", { class: "row" }, el("button", { id: "create-queue", class: "primary", onclick: guarded(async () => {
      const value = (id) => document.getElementById(id).value.trim();
      let name = value("nq-name");
      const fifo = document.getElementById("nq-fifo").checked;
      if (fifo && !name.endsWith(".fifo")) name += ".fifo";
      const settings = {};
      for (const [id, key] of [["nq-visibility", "visibility_timeout"], ["nq-delay", "delay"],
        ["nq-retention", "retention"]]) {
        if (value(id) !== "") settings[key] = Number(value(id));
      }
      if (fifo && document.getElementById("nq-cbd").checked) settings.content_based_dedup = true;
      if (value("nq-dlq")) {
        settings.dead_letter = { queue: value("nq-dlq"), max_receive_count: Number(value("nq-max") || 5) };
      }
      await api("PUT", `/queues/${q(name)}`, settings);
      show(`created queue ${name}`);
      form.setAttribute("hidden", "");
      await done();
    }) }, "create")),
  );
  return form;
}

// -- one queue --------------------------------------------------------------------------------

const EDITABLE = [
  ["visibility_timeout", "visibility timeout (s)"], ["delay", "delay (s)"],
  ["retention", "retention (s)"], ["rate_limit", "rate limit (msgs/s, empty: none)"],
  ["compress_over", "compress over (bytes, empty: off)"],
];

async function queuePage(name) {
  const doc = await api("GET", `/queues/${q(name)}`);
  const a = doc.attributes;
  const dead = a.dead_letter ? a.dead_letter.queue : name;
  const state = { state: "ready", after: 0, pages: [0] };

  const attributes = el("div", { class: "grid", id: "attributes" },
    EDITABLE.map(([key, label]) => [el("label", { for: `attr-${key}` }, label),
      el("input", { id: `attr-${key}`, value: a[key] ?? "", size: 10 })]),
    el("label", { for: "attr-dlq-queue" }, "dead-letter queue, max receives"),
    el("span", {}, el("input", { id: "attr-dlq-queue", value: a.dead_letter ? a.dead_letter.queue : "" }),
      " ", el("input", { id: "attr-dlq-max", size: 5,
        value: a.dead_letter ? a.dead_letter.max_receive_count : "" })),
  );
  const saveAttributes = guarded(async () => {
    const changes = {};
    for (const [key] of EDITABLE) {
      const raw = document.getElementById(`attr-${key}`).value.trim();
      changes[key] = raw === "" ? null : Number(raw);
    }
    const dlq = document.getElementById("attr-dlq-queue").value.trim();
    changes.dead_letter = dlq ? {
      queue: dlq, max_receive_count: Number(document.getElementById("attr-dlq-max").value || 5),
    } : null;
    for (const key of ["visibility_timeout", "delay", "retention"]) {
      if (changes[key] === null) delete changes[key];
    }
    await api("PATCH", `/queues/${q(name)}`, changes);
    show("attributes saved");
  });

  const counts = el("p", { id: "counts" });
  const charts = el("div", { class: "charts" });
  const list = el("tbody");
  const detail = el("div", { id: "message" });
  const progress = el("progress", { id: "redrive-progress", max: 1, value: 0, hidden: "" });
  const progressText = el("span", { id: "redrive-done" });

  async function refreshCounts() {
    const s = await api("GET", `/queues/${q(name)}/stats`);
    const held = dead === name ? null : await api("GET", `/queues/${q(dead)}/stats`).catch(() => null);
    counts.replaceChildren(
      el("span", { id: "counts-now" }, `now: ${s.ready} ready · ${s.delayed} delayed · ${s.in_flight} in flight` +
        (held ? ` · ${held.ready + held.delayed + held.in_flight} in ${dead}` : "") + ` · oldest ${age(s.oldest_age)}`),
      el("br"),
      el("span", { id: "counts-totals", class: "muted" }, `totals since created: ${s.sent} sent · ${s.received} received` +
        ` · ${s.deleted} deleted · ${s.dead} dead-lettered · ${s.expired} expired`));
    const h = await api("GET", `/ui/api/queues/${q(name)}/history`);
    charts.replaceChildren(
      chart("depth (messages, last hour)", [["depth", h.depth]], "chart-depth"),
      chart("a second (last hour)", [["sent", h.rate], ["received", h.received], ["deleted", h.deleted]], "chart-rates"));
  }

  async function page() {
    const search = state.search ? `&search=${q(state.search)}` : "";
    const messages = await api("GET",
      `/queues/${q(name)}/peek?state=${state.state}&limit=20&after=${state.after}${search}`);
    list.replaceChildren(...messages.map((m) => el("tr", { "data-id": m.id },
      el("td", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); open(m.id); } }, m.id)),
      el("td", { class: "num" }, m.priority), el("td", { class: "num" }, m.receive_count),
      el("td", {}, (m.body || "").slice(0, 80)),
    )));
    state.last = messages.length ? messages[messages.length - 1].sequence : null;
    if (!messages.length) list.append(el("tr", {}, el("td", { colspan: 4, class: "muted" }, "none")));
    await refreshCounts();
  }

  async function open(id) {
    const m = await api("GET", `/queues/${q(name)}/message/${q(id)}`);
    const act = (label, fn, cls) => el("button", { id: label.replace(/ /g, "-"), class: cls,
      onclick: guarded(async () => { await fn(); await page(); }) }, label);
    detail.replaceChildren(el("div", { class: "card" },
      el("h2", {}, `message ${m.id}`),
      el("div", { class: "grid" }, [
        ["state", el("span", { id: "message-state" }, m.state || "")],
        ["priority", el("span", { id: "message-priority" }, m.priority)],
        ["receives", m.receive_count], ["sent", when(m.sent_at)], ["visible", when(m.visible_at)],
        ["group", m.group_id ?? "-"], ["source queue", m.source_queue ?? "-"],
        ["error", m.error ?? "-"], ["attributes", el("code", {}, JSON.stringify(m.attributes))],
      ].map(([label, value]) => [el("span", { class: "muted" }, label), el("span", {}, value)])),
      el("pre", { id: "message-body" }, m.encoding === "base64" ? `(base64) ${m.body}` : pretty(m.body)),
      el("div", { class: "row" },
        act("edit", async () => edit(m)),
        act("fail", () => api("POST", `/queues/${q(name)}/message/${q(id)}/fail`, {})),
        act("reset", () => api("POST", `/queues/${q(name)}/message/${q(id)}/reset`)),
        act("move to DLQ", () => api("POST", `/queues/${q(name)}/message/${q(id)}/invalid`, {})),
        act("delete", async () => {
          if (!confirm(`Delete message ${id}?`)) return;
          await api("DELETE", `/queues/${q(name)}/message/${q(id)}`);
          detail.replaceChildren();
        }, "danger"),
      ),
    ));
  }

  function edit(m) {
    const form = el("div", { class: "card", id: "edit-form" },
      el("h2", {}, "edit"),
      el("textarea", { id: "edit-body" }, m.encoding === "base64" ? "" : pretty(m.body)),
      el("div", { class: "row" },
        el("label", {}, "priority ", el("input", { id: "edit-priority", value: m.priority, size: 6 })),
        el("label", {}, "visible in (s) ", el("input", { id: "edit-visible-in", size: 6 })),
        el("button", { id: "save-message", class: "primary", onclick: guarded(async () => {
          const change = { priority: Number(document.getElementById("edit-priority").value) };
          const body = document.getElementById("edit-body").value;
          if (body !== pretty(m.body)) {
            change.body = body;
            try { change.body = JSON.stringify(JSON.parse(body)); } catch { /* text */ }
          }
          const visible = document.getElementById("edit-visible-in").value.trim();
          if (visible !== "") change.visible_in = Number(visible);
          await api("PATCH", `/queues/${q(name)}/message/${q(m.id)}`, change);
          show(`message ${m.id} saved`);
          await page();
          await open(m.id);
        }) }, "save")),
    );
    detail.append(form);
  }

  const redriveAll = guarded(async () => {
    const s = await api("GET", `/queues/${q(dead)}/stats`);
    progress.hidden = false;
    progress.max = Math.max(1, s.ready);
    progress.value = 0;
    let moved = 0;
    for (;;) {
      // from a queue's own page its dead letters come back to it; on a dead-letter queue's
      // page each goes back to the queue it came from
      const to = dead === name ? undefined : name;
      const got = await api("POST", `/queues/${q(dead)}/redrive`, { limit: 50, to });
      moved += got.moved.length;
      progress.value = Math.min(progress.max, moved);
      progressText.textContent = `${moved} of ${s.ready}`;
      if (got.moved.length === 0) break;
    }
    progress.value = progress.max;
    progressText.textContent = `redrove ${moved} from ${dead}: 100%`;
    await page();
  });

  const deleteQueue = guarded(async () => {
    if (!confirm(`Delete queue ${name} and every message in it? This cannot be undone.`)) return;
    await api("DELETE", `/queues/${q(name)}`);
    show(`deleted queue ${name}`);
    location.hash = "#/";
  });

  const sendForm = el("div", { class: "card", id: "send-form" },
    el("textarea", { id: "send-body", placeholder: "body" }),
    el("div", { class: "row" },
      el("label", {}, "attributes (name=value, a line each) ",
        el("textarea", { id: "send-attributes", class: "small" })),
      el("label", {}, "delay (s) ", el("input", { id: "send-delay", size: 5 })),
      el("label", {}, "group id ", el("input", { id: "send-group", size: 12 })),
      el("label", {}, "de-duplication id ", el("input", { id: "send-dedup", size: 12 })),
      el("button", { id: "send-message", class: "primary", onclick: guarded(async () => {
        const value = (id) => document.getElementById(id).value;
        const message = { body: value("send-body") };
        const attributes = {};
        for (const line of value("send-attributes").split("\n")) {
          if (!line.trim()) continue;
          const at = line.indexOf("=");
          if (at < 1) throw new Error(`attribute "${line}": write name=value`);
          attributes[line.slice(0, at).trim()] = line.slice(at + 1);
        }
        if (Object.keys(attributes).length) message.attributes = attributes;
        if (value("send-delay").trim() !== "") message.delay = Number(value("send-delay"));
        if (value("send-group").trim()) message.group_id = value("send-group").trim();
        if (value("send-dedup").trim()) message.dedup_id = value("send-dedup").trim();
        const sent = await api("POST", `/queues/${q(name)}/messages`, message);
        show(sent.duplicate ? `a duplicate of ${sent.id}: not sent again` : `sent ${sent.id}`);
        await page();
      }) }, "send")),
  );

  const purge = guarded(async () => {
    if (!confirm(`Delete every message of ${name}? This cannot be undone.`)) return;
    const r = await api("POST", `/queues/${q(name)}/purge`);
    show(`purged ${r.purged} from ${name}`);
    await page();
  });

  main.replaceChildren(
    el("h1", {}, `Queue ${name}`),
    counts,
    charts,
    el("h2", {}, "attributes"), attributes,
    el("div", { class: "row" }, el("button", { id: "save-attributes", onclick: saveAttributes }, "save attributes")),
    el("h2", {}, "send a message"),
    sendForm,
    el("h2", {}, "messages"),
    el("div", { class: "row" },
      el("select", { id: "state", onchange: guarded(async (e) => {
        state.state = e.target.value; state.after = 0; await page(); }) },
        ["ready", "delayed", "in_flight"].map((s) => el("option", { value: s }, s))),
      el("button", { id: "first-page", onclick: guarded(async () => { state.after = 0; await page(); }) }, "first"),
      el("button", { id: "next-page", onclick: guarded(async () => {
        if (state.last != null) { state.after = state.last; await page(); } }) }, "next"),
      el("input", { id: "search-id", placeholder: "id, body text or attribute" }),
      el("button", { id: "search", onclick: guarded(async () => {
        state.search = document.getElementById("search-id").value.trim();
        state.after = 0;
        await page();
      }) }, "search"),
      el("button", { id: "open-id", onclick: guarded(() => open(document.getElementById("search-id").value.trim())) }, "open by id"),
    ),
    el("table", { id: "messages" },
      el("thead", {}, el("tr", {}, ["id", "priority", "receives", "body"].map((h) => el("th", {}, h)))),
      list),
    detail,
    el("h2", {}, "dead letters"),
    el("div", { class: "row" },
      el("button", { id: "redrive-all", onclick: redriveAll },
        dead === name ? "redrive all to their source queues" : `redrive all from ${dead}`),
      progress, progressText),
    el("h2", {}, "danger zone"),
    el("div", { class: "row" }, el("button", { id: "purge", class: "danger", onclick: purge }, "purge"),
      el("button", { id: "delete-queue", class: "danger", onclick: deleteQueue }, "delete queue")),
  );
  await page();
  every(() => refreshCounts().catch(() => {}), 2000);
}

// -- topics and consumers ---------------------------------------------------------------------

async function topicsPage() {
  const [topics, queues] = await Promise.all([api("GET", "/topics"), api("GET", "/queues")]);
  const cards = [];
  for (const topic of topics.topics) {
    const subs = await api("GET", `/topics/${q(topic)}`);
    const pick = el("select", { id: `subscribe-${topic}` },
      queues.queues.filter((n) => !subs.includes(n)).map((n) => el("option", { value: n }, n)));
    const text = el("input", { id: `publish-${topic}`, value: '{"test": true}', size: 30 });
    cards.push(el("div", { class: "card", "data-topic": topic },
      el("h2", {}, topic),
      el("ul", {}, subs.map((s) => el("li", {}, s, " ",
        el("button", { onclick: guarded(async () => {
          await api("DELETE", `/topics/${q(topic)}/queues/${q(s)}`); await topicsPage(); }) }, "unsubscribe")))),
      el("div", { class: "row" }, pick, el("button", { class: "subscribe", onclick: guarded(async () => {
        await api("PUT", `/topics/${q(topic)}/queues/${q(pick.value)}`); await topicsPage(); }) }, "subscribe")),
      el("div", { class: "row" }, text, el("button", { class: "publish", onclick: guarded(async () => {
        const res = await fetch(`/topics/${q(topic)}/message`, { method: "PUT", body: text.value,
          headers: authHeaders() });
        show(res.ok ? `published to ${Object.keys(await res.json()).length} queues` : "publish failed", !res.ok);
      }) }, "publish test message")),
    ));
  }
  const name = el("input", { id: "new-topic", placeholder: "topic name" });
  main.replaceChildren(el("h1", {}, "Topics"),
    el("div", { class: "row" }, name, el("button", { id: "create-topic", onclick: guarded(async () => {
      await api("PUT", `/topics/${q(name.value.trim())}`); await topicsPage(); }) }, "create")),
    ...(cards.length ? cards : [el("p", { class: "muted" }, "No topics yet.")]));
}

function authHeaders() {
  const token = sessionStorage.getItem("conveyor-token");
  return token ? { Authorization: "Bearer " + token } : {};
}

async function consumersPage() {
  const data = await api("GET", "/consumers");
  const now = Date.now() / 1000;
  // workers of the SDK, and the push gateway's consumers (app, mode, weight, in flight)
  const shown = (v) => (v === undefined || v === null ? "-" : String(v));
  main.replaceChildren(el("h1", {}, "Consumers"),
    el("table", { id: "consumers" },
      el("thead", {}, el("tr", {}, ["id", "queue", "via", "mode", "weight", "in flight",
        "last heartbeat", "registered", "info"].map((h) => el("th", {}, h)))),
      el("tbody", {}, data.consumers.length ? data.consumers.map((c) => el("tr", { "data-consumer": c.id },
        el("td", {}, c.id), el("td", {}, c.queue ?? "-"), el("td", {}, c.info.via ?? "worker"),
        el("td", { class: "mode" }, shown(c.info.mode)), el("td", { class: "weight" }, shown(c.info.weight)),
        el("td", { class: "in-flight" }, shown(c.info.in_flight)),
        el("td", {}, `${age(now - c.heartbeat_at)} ago`),
        el("td", {}, when(c.registered_at)), el("td", {}, el("code", {}, JSON.stringify(c.info))))) :
        el("tr", {}, el("td", { colspan: 9, class: "muted" }, "No live consumers.")))));
}

// -- routing ----------------------------------------------------------------------------------

async function route() {
  clearTimeout(timer);
  round += 1;
  const hash = location.hash.slice(1) || "/";
  try {
    if (hash.startsWith("/queue/")) {
      await queuePage(decodeURIComponent(hash.slice("/queue/".length)));
    } else if (hash === "/topics") {
      await topicsPage();
    } else if (hash === "/consumers") {
      await consumersPage();
    } else {
      const refresh = await overview();
      every(() => refresh().catch((err) => show(err.message, true)), 2000);
    }
  } catch (err) {
    show(err.message, true);
  }
}

window.addEventListener("hashchange", route);
route();
