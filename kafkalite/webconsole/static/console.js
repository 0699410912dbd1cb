// kafkalite's web console: one page, views chosen by the URL's hash
// (#/, #/topics, #/topic/<t>, #/messages?topic=..., #/schemas, #/groups,
// #/group/<g>, #/metrics, #/sql), each drawn from the JSON API under ./api/ (app.py). Charts
// are SVG drawn here (lineChart); nothing is loaded from the network.
"use strict";

const POLL_MS = 1000;        // the overview's charts
const LAG_POLL_MS = 2000;    // a group's offsets, lag and members
const CARDS_EVERY = 5;       // the overview's counts: every 5th poll of its charts
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777",
                "#4b5563"];
let timer = null;          // the current view's next poll (poll()), cleared on every route change
let nextFlash = "";        // a success message for the next view drawn
let generation = 0;        // route changes so far: a view drawn late for an old route stops

// ---- small helpers ---------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

// A path of this server as a URL without the user:password@ a page opened
// with one carries in its base URL (which fetch() refuses): the browser
// sends the login it has for the realm, as it does for a prompt's.
function here(path) {
  return new URL(path, location.href).href;
}

async function api(method, path, body) {
  // the header a page of another site cannot send (no CORS preflight is
  // ever approved): with security on, changes without it are refused
  const init = {method, headers: {"X-Kafkalite-Console": "1"}};
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(here("api/" + path), init);
  let data = null;
  try { data = await resp.json(); } catch (e) { /* not JSON: reported below */ }
  if (!resp.ok) {
    const err = new Error((data && data.error) || `${resp.status} ${resp.statusText}`);
    err.status = resp.status;      // 403: the user's ACLs deny it (authorization.py)
    throw err;
  }
  return data;
}

// A change done: say so on the view drawn next (the same one, redrawn, or another).
function done(message, hash) {
  nextFlash = message;
  if (hash && location.hash !== hash) location.hash = hash; else route();
}

function flash(message, kind) {
  const box = document.getElementById("flash");
  box.textContent = message;
  box.className = kind || "error";
  box.hidden = !message;
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : Math.round(n)) + " " + units[i];
}

function fmtNum(n) {
  if (n === null || n === undefined) return "";
  return Math.abs(n) >= 100 || Number.isInteger(n) ? Math.round(n).toLocaleString("en")
                                                    : n.toFixed(2);
}

function fmtTime(ms) {
  return ms < 0 ? String(ms) : new Date(ms).toISOString().replace("T", " ").replace("Z", "");
}

function table(headers, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, headers.map(h =>
      el("th", {class: h.endsWith("#") ? "num" : null}, h.replace(/#$/, ""))))),
    el("tbody", {}, rows.map(r => el("tr", {}, r.map((c, i) =>
      el("td", {class: headers[i].endsWith("#") ? "num" : null}, c))))));
}

// ---- bytes as text, JSON or hex ----------------------------------------------------------------

function b64bytes(b64) {
  const raw = atob(b64);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

function render(b64, format) {
  if (b64 === null || b64 === undefined) return el("span", {class: "muted"}, "null");
  const bytes = b64bytes(b64);
  if (format === "hex") {
    const lines = [];
    for (let i = 0; i < bytes.length; i += 16) {
      const chunk = Array.from(bytes.slice(i, i + 16));
      lines.push(i.toString(16).padStart(6, "0") + "  " +
                 chunk.map(b => b.toString(16).padStart(2, "0")).join(" "));
    }
    return el("pre", {class: "hex"}, lines.join("\n"));
  }
  const text = new TextDecoder("utf-8", {fatal: false}).decode(bytes);
  if (format === "json") {
    try { return el("pre", {class: "json"}, JSON.stringify(JSON.parse(text), null, 2)); }
    catch (e) { return el("pre", {class: "json invalid", title: "not JSON: " + e.message}, text); }
  }
  return el("pre", {class: "text"}, text);
}

// A key or value the API decoded through the schema registry (its
// key_schema / value_schema): the JSON, with the schema beside it; one that
// did not decode: its bytes as chosen, and why. Hex always shows the bytes.
function renderField(b64, decoded, format) {
  if (!decoded || format === "hex") return render(b64, format);
  const s = decoded.schema || {};
  const which = s.subject ? `${s.subject} v${s.version} · ${s.type}` : "";
  if ("decoded" in decoded) {
    return el("div", {class: "decoded"},
      el("pre", {class: "json"}, JSON.stringify(decoded.decoded, null, 2)),
      el("span", {class: "schema"}, `schema ${s.id}` + (which ? ` · ${which}` : "")));
  }
  return el("div", {class: "undecoded"}, render(b64, format),
            el("span", {class: "reason"}, "not decoded: " + decoded.error));
}

// A subject's row: versions, latest id and type, compatibility (and whose),
// or why it is not shown.
function subjectRow(s) {
  if (s.denied) return [s.subject, el("span", {class: "muted"}, s.denied), "", "", ""];
  const level = s.compatibility === null ? el("span", {class: "muted"}, s.compatibility_source)
    : `${s.compatibility} (${s.compatibility_source})`;
  return [s.subject, s.type, s.versions.join(", "), s.id, level];
}

function subjectsTable(r, id) {
  if (r.error) return el("p", {class: "muted", id}, "No schemas shown: " + r.error);
  if (!r.subjects.length) return el("p", {class: "muted", id}, "No subjects.");
  return table(["subject", "type", "versions", "latest id#", "compatibility"],
               r.subjects.map(subjectRow), {id});
}

// ---- an SVG line chart -------------------------------------------------------------------------

// series: [{name, values: [number|null]}] over times t (epoch s); the legend
// goes below the plot, never over the data.
function lineChart(id, title, t, series, fmt) {
  const W = 600, H = 200, L = 64, R = 12, T = 10, B = 24;
  const svg = svgEl("svg", {class: "chart", id, viewBox: `0 0 ${W} ${H}`, role: "img",
                            "aria-label": title});
  const all = series.flatMap(s => s.values).filter(v => v !== null && v !== undefined);
  const ymax = Math.max(1, ...all) * 1.1;
  const t0 = t.length ? t[0] : 0, t1 = t.length > 1 ? t[t.length - 1] : t0 + 1;
  const x = v => L + (W - L - R) * (v - t0) / Math.max(t1 - t0, 1e-9);
  const y = v => H - B - (H - T - B) * v / ymax;
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4;
    svg.append(svgEl("line", {class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v)}));
    const label = svgEl("text", {x: L - 6, y: y(v) + 3, "text-anchor": "end"});
    label.textContent = fmt(v);
    svg.append(label);
  }
  svg.append(svgEl("line", {class: "axis", x1: L, x2: L, y1: T, y2: H - B}));
  svg.append(svgEl("line", {class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}));
  if (t.length) {
    for (const [v, anchor] of [[t0, "start"], [t1, "end"]]) {
      const label = svgEl("text", {x: x(v), y: H - 8, "text-anchor": anchor});
      label.textContent = new Date(v * 1000).toTimeString().slice(0, 8);
      svg.append(label);
    }
  }
  series.forEach((s, i) => {
    const pts = [];
    s.values.forEach((v, j) => {
      if (v !== null && v !== undefined) pts.push(`${x(t[j]).toFixed(1)},${y(v).toFixed(1)}`);
    });
    svg.append(svgEl("polyline", {class: "series", "data-name": s.name,
                                  "data-points": pts.length, points: pts.join(" "),
                                  stroke: COLORS[i % COLORS.length]}));
  });
  return el("div", {class: "chart-box"}, el("h3", {}, title), svg,
            el("div", {class: "legend"}, series.map((s, i) =>
              el("span", {}, el("i", {style: `background:${COLORS[i % COLORS.length]}`}), s.name))));
}

// Run fn every ms while the view that called this is shown; the next run is
// scheduled when one ends, so a slow server never has polls piling up.
function poll(fn, ms) {
  const mine = generation;
  const step = async () => {
    try { await fn(); } catch (e) { if (mine === generation) flash(e.message); }
    if (mine === generation) timer = setTimeout(step, ms);
  };
  timer = setTimeout(step, ms);
}

// ---- views -----------------------------------------------------------------------------------

const views = {};

views.overview = async function (main) {
  const c = await api("GET", "cluster");
  const cards = c => [
    ["brokers", c.brokers.length],
    ["controller", c.controller_id < 0 ? "supervisor" : c.controller_id],
    ["topics", c.topic_count], ["partitions", c.partition_count],
    ["consumer groups", c.group_count]].map(([k, v]) =>
      el("div", {class: "card", id: "card-" + k.replace(" ", "-")},
         el("div", {class: "n"}, v), el("div", {class: "label"}, k)));
  const cardBox = el("div", {class: "cards"}, cards(c));
  main.append(el("h1", {}, "Cluster"), cardBox,
    el("h2", {}, "Throughput"), el("div", {class: "charts", id: "charts"}),
    el("h2", {}, "Brokers"),
    table(["id", "host", "port#", "up"], c.brokers.map(b =>
      [b.id, b.host, b.port, b.up === null ? "" : (b.up ? "yes" : "no")])));
  let ticks = 0;
  const draw = async () => {
    if (++ticks % CARDS_EVERY === 0) cardBox.replaceChildren(...cards(await api("GET", "cluster")));
    const box = document.getElementById("charts");
    if (!box) return;
    let h;
    try { h = await api("GET", "throughput"); } catch (e) {
      // node-wide rates need Describe on the cluster: say so in place of the charts
      if (e.status !== 403) throw e;
      box.replaceChildren(el("p", {class: "muted", id: "charts-denied"}, e.message));
      return;
    }
    box.replaceChildren(
      lineChart("chart-bytes", "Bytes per second", h.t,
                [{name: "in", values: h.bytes_in}, {name: "out", values: h.bytes_out}], fmtBytes),
      lineChart("chart-messages", "Records in per second", h.t,
                [{name: "records in", values: h.messages_in}], fmtNum),
      lineChart("chart-requests", "Requests per second", h.t,
                [{name: "Produce", values: h.produce_requests},
                 {name: "Fetch", values: h.fetch_requests}], fmtNum));
  };
  await draw();
  poll(draw, POLL_MS);
};

function parseConfigs(text) {
  const out = {};
  for (const line of text.split("\n").map(s => s.trim()).filter(Boolean)) {
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`config line ${JSON.stringify(line)} is not name=value`);
    out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

views.topics = async function (main) {
  const topics = await api("GET", "topics");
  const form = el("form", {class: "inline", id: "create-topic"},
    el("label", {}, "name", el("input", {name: "name", required: true})),
    el("label", {}, "partitions", el("input", {name: "partitions", type: "number", min: 1,
                                               value: 1})),
    el("label", {}, "replication factor", el("input", {name: "replication_factor",
                                                       type: "number", value: -1})),
    el("label", {}, "configs (name=value per line)",
       el("textarea", {name: "configs", rows: 1, cols: 30})),
    el("button", {type: "submit"}, "Create topic"));
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    try {
      const r = await api("POST", "topics", {
        name: f.get("name"), partitions: Number(f.get("partitions")),
        replication_factor: Number(f.get("replication_factor")),
        configs: parseConfigs(f.get("configs"))});
      done(`created topic ${r.created}`);
    } catch (e) { flash(e.message); }
  });
  main.append(el("h1", {}, "Topics"), form,
    table(["topic", "partitions#", "replication#", "records#", "size#", ""],
      topics.map(t => [el("a", {href: "#/topic/" + encodeURIComponent(t.name)}, t.name),
                       t.partitions, t.replication_factor, fmtNum(t.records), fmtBytes(t.size),
                       el("a", {href: "#/messages?topic=" + encodeURIComponent(t.name)},
                          "messages")]), {id: "topics"}));
};

views.topic = async function (main, name) {
  const t = await api("GET", "topics/" + encodeURIComponent(name));
  const schemasBox = el("div", {id: "topic-schemas"});
  const del = el("button", {class: "danger", id: "delete-topic", onclick: async () => {
    if (!confirm(`Delete topic ${name} and all its records?`)) return;
    try {
      await api("DELETE", "topics/" + encodeURIComponent(name));
      done(`deleted topic ${name}`, "#/topics");
    } catch (e) { flash(e.message); }
  }}, "Delete topic");
  const alter = el("form", {class: "inline", id: "alter-config"},
    el("label", {}, "config", el("input", {name: "name", required: true, list: "config-names"})),
    el("label", {}, "value", el("input", {name: "value"})),
    el("button", {type: "submit"}, "Set"),
    el("datalist", {id: "config-names"},
       (t.configs || []).map(c => el("option", {value: c.name}))));
  alter.addEventListener("submit", async ev => {
    ev.preventDefault();
    const f = new FormData(alter);
    try {
      await api("POST", `topics/${encodeURIComponent(name)}/configs`,
                {set: {[f.get("name")]: f.get("value")}});
      done(`set ${f.get("name")}=${f.get("value")} on ${name}`);
    } catch (e) { flash(e.message); }
  });
  const reset = c => el("button", {class: "plain", onclick: async () => {
    try {
      await api("POST", `topics/${encodeURIComponent(name)}/configs`, {delete: [c.name]});
      done(`${c.name} of ${name} is back to its default`);
    } catch (e) { flash(e.message); }
  }}, "reset");
  main.append(el("h1", {}, "Topic ", el("span", {id: "topic-name"}, name)),
    el("div", {class: "toolbar"},
       el("a", {href: "#/messages?topic=" + encodeURIComponent(name)}, "Browse messages"), del),
    el("h2", {}, "Partitions"),
    table(["partition#", "leader#", "replicas", "ISR", "start offset#", "end offset#", "size#"],
      t.partitions.map(p => [p.partition, p.leader, p.replicas.join(","), p.isr.join(","),
                             p.start_offset, p.end_offset, fmtBytes(p.size)]),
      {id: "partitions"}),
    el("h2", {}, "Schemas"), schemasBox,
    el("h2", {}, "Configs"), alter,
    t.configs === null  // the user may not DescribeConfigs this topic
      ? el("p", {class: "muted", id: "configs"}, "You may not describe this topic's configs.")
      : table(["name", "value", "source", ""], t.configs.map(c =>
          [c.name, c.value === null ? "(sensitive)" : c.value, c.source,
           c.source === "DYNAMIC_TOPIC_CONFIG" || c.source === "TOPIC_CONFIG" ? reset(c) : ""]),
          {id: "configs"}));
  // its subjects by TopicNameStrategy, from the schema registry
  const subjects = await api("GET", `topics/${encodeURIComponent(name)}/schemas`);
  schemasBox.replaceChildren(subjectsTable(subjects, "topic-subjects"));
};

views.schemas = async function (main) {
  const r = await api("GET", "schemas");
  main.append(el("h1", {}, "Schemas"),
    el("p", {class: "muted"}, r.registry ? `schema registry ${r.registry}` : ""),
    subjectsTable(r, "subjects"),
    r.truncated ? el("p", {class: "muted"}, "only the first subjects are shown") : "");
};

views.messages = async function (main, _, q) {
  const topics = (await api("GET", "topics")).filter(t => !t.internal);
  const topic = q.topic || (topics[0] && topics[0].name) || "";
  const meta = topics.find(t => t.name === topic);
  const form = el("form", {class: "inline", id: "browse"},
    el("label", {}, "topic", el("select", {name: "topic"},
      topics.map(t => el("option", {value: t.name, selected: t.name === topic}, t.name)))),
    el("label", {}, "partition", el("select", {name: "partition"},
      el("option", {value: ""}, "all"),
      Array.from({length: meta ? meta.partitions : 0}, (_, i) =>
        el("option", {value: i, selected: q.partition === String(i)}, i)))),
    el("label", {}, "from", el("select", {name: "mode"},
      ["start", "offset", "timestamp"].map(m =>
        el("option", {value: m, selected: (q.mode || "start") === m}, m)))),
    el("label", {}, "offset / timestamp (ms or date)",
       el("input", {name: "at", value: q.at || "", size: 24})),
    el("label", {}, "key (hex digits when keys are shown as hex)",
       el("input", {name: "key", value: q.key || ""})),
    el("label", {}, "limit", el("input", {name: "limit", type: "number", min: 1, max: 500,
                                          value: q.limit || 50})),
    el("label", {}, "key as", el("select", {name: "kfmt"}, ["text", "json", "hex"].map(m =>
      el("option", {value: m, selected: (q.kfmt || "text") === m}, m)))),
    el("label", {}, "value as", el("select", {name: "vfmt"}, ["text", "json", "hex"].map(m =>
      el("option", {value: m, selected: (q.vfmt || "text") === m}, m)))),
    el("button", {type: "submit"}, "Show"));
  form.topic.addEventListener("change", () => {
    location.hash = "#/messages?topic=" + encodeURIComponent(form.topic.value);
  });
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const f = new FormData(form);
    const params = new URLSearchParams();
    for (const k of ["topic", "partition", "mode", "at", "key", "limit", "kfmt", "vfmt"]) {
      if (f.get(k)) params.set(k, f.get(k));
    }
    params.set("run", Date.now());          // a new hash even when nothing changed
    location.hash = "#/messages?" + params;
  });
  main.append(el("h1", {}, "Messages"), form, el("div", {id: "results"}));
  if (!q.run || !topic) return;
  const params = new URLSearchParams({limit: q.limit || 50});
  if (q.partition) params.set("partition", q.partition);
  // a key is typed as it is shown: as hex digits when keys are shown as hex
  if (q.key && q.kfmt === "hex") params.set("key_hex", q.key.replace(/\s+/g, ""));
  else if (q.key) params.set("key", q.key);
  if (q.mode === "offset") params.set("offset", q.at || "0");
  if (q.mode === "timestamp") {
    const at = (q.at || "").trim();
    const ms = /^\d+$/.test(at) ? Number(at) : Date.parse(at);
    if (Number.isNaN(ms)) throw new Error(`${JSON.stringify(at)} is neither epoch ms nor a date`);
    params.set("timestamp", ms);
  }
  const r = await api("GET", `topics/${encodeURIComponent(topic)}/messages?${params}`);
  const summary = `${r.records.length} record(s), ${r.scanned} read` +
    (r.truncated ? "; more follow (limit, size or time bound reached)" : "");
  const headers = h => h.length ? h.map(([k, v]) =>
    el("span", {class: "hdr"}, k + ": ", render(v, "text").textContent)) : "";
  // one partition: the next page starts where this read stopped
  const next = q.partition && r.truncated ? el("button", {class: "plain", id: "next-page",
    onclick: () => {
      const p = new URLSearchParams({...q, mode: "offset", at: r.next[q.partition],
                                     run: Date.now()});
      location.hash = "#/messages?" + p;
    }}, `Next from offset ${r.next[q.partition]}`) : null;
  document.getElementById("results").append(
    el("p", {class: "muted", id: "summary"}, summary, " ", next),
    table(["partition#", "offset#", "timestamp", "key", "value", "headers"],
      r.records.map(m => [m.partition, m.offset, fmtTime(m.timestamp),
                          renderField(m.key, m.key_schema, q.kfmt || "text"),
                          renderField(m.value, m.value_schema, q.vfmt || "text"),
                          headers(m.headers)]), {id: "records"}));
};

views.groups = async function (main) {
  const groups = await api("GET", "groups");
  main.append(el("h1", {}, "Consumer groups"),
    table(["group", "state", "members#", "lag#"], groups.map(g =>
      [el("a", {href: "#/group/" + encodeURIComponent(g.group_id)}, g.group_id), g.state,
       g.members === null ? "" : g.members, g.lag === null ? "" : fmtNum(g.lag)]),
      {id: "groups"}));
};

views.group = async function (main, id) {
  const g = await api("GET", "groups/" + encodeURIComponent(id));
  const form = el("form", {class: "inline", id: "reset-offsets"},
    el("label", {}, "reset to", el("select", {name: "spec"},
      ["to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime"].map(s =>
        el("option", {value: s}, s)))),
    el("label", {}, "value (offset, shift or epoch ms)", el("input", {name: "value"})),
    el("label", {}, "topics (comma-separated; default: all committed)",
       el("input", {name: "topics"})),
    el("button", {type: "submit", name: "apply"}, "Reset offsets"),
    el("button", {type: "button", class: "plain", id: "dry-run"}, "Dry run"));
  const submit = async dry => {
    const f = new FormData(form);
    const body = {spec: f.get("spec"), dry_run: dry,
                  topics: f.get("topics").split(",").map(s => s.trim()).filter(Boolean)};
    if (f.get("value")) body.value = f.get("value");
    try {
      const r = await api("POST", `groups/${encodeURIComponent(id)}/reset-offsets`, body);
      const what = r.offsets.map(o => `${o.topic}-${o.partition}@${o.offset}`).join(", ");
      if (dry) flash(`would reset ${id}: ${what}`, "ok");
      else done(`reset ${id}: ${what}`);
    } catch (e) { flash(e.message); }
  };
  form.addEventListener("submit", ev => { ev.preventDefault(); submit(false); });
  form.querySelector("#dry-run").addEventListener("click", () => submit(true));
  // what changes while the page is open: redrawn every LAG_POLL_MS (the form is left alone)
  const live = g => [
    el("p", {}, `state ${g.state}, protocol ${g.protocol || "-"}, ${g.members.length} member(s)`),
    el("h2", {}, "Members"),
    table(["member", "client", "host", "assignment"], g.members.map(m =>
      [m.member_id, m.client_id, m.host, m.assignment.map(([t, p]) => `${t}-${p}`).join(", ")]),
      {id: "members"}),
    el("h2", {}, "Offsets and lag"),
    table(["topic", "partition#", "committed#", "end offset#", "lag#", "member"],
      g.offsets.map(o => [o.topic, o.partition, o.committed, o.end_offset,
                          o.lag === null ? "" : o.lag, o.client_id || ""]), {id: "offsets"}),
    el("div", {class: "charts narrow"}, lineChart("chart-lag", "Lag per partition over time",
      g.lag_history.t, Object.entries(g.lag_history.series).map(([name, values]) =>
        ({name, values})), fmtNum))];
  const box = el("div", {id: "group-live"}, live(g));
  main.append(el("h1", {}, "Consumer group ", el("span", {id: "group-id"}, id)), box,
    el("h2", {}, "Reset offsets (the group must have no members)"), form);
  const mine = generation;
  poll(async () => {
    const now = await api("GET", "groups/" + encodeURIComponent(id));
    if (mine === generation) box.replaceChildren(...live(now));
  }, LAG_POLL_MS);
};

views.metrics = async function (main, _, q) {
  const filter = q.filter || "";
  const r = await api("GET", "metrics?filter=" + encodeURIComponent(filter));
  const form = el("form", {class: "inline", id: "metrics-filter"},
    el("label", {}, "name contains", el("input", {name: "filter", value: filter})),
    el("button", {type: "submit"}, "Filter"));
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    location.hash = "#/metrics?filter=" + encodeURIComponent(form.filter.value);
  });
  const rows = [];
  for (const f of r.families) {
    for (const [name, labels, value] of f.samples) {
      rows.push([el("span", {title: f.help}, name),
                 Object.entries(labels).map(([k, v]) => `${k}="${v}"`).join(", "),
                 typeof value === "number" ? fmtNum(value) : value]);
    }
  }
  main.append(el("h1", {}, "Broker metrics"), form,
    ...(r.truncated ? [el("p", {class: "muted"}, "only the first samples are shown: filter")]
                    : []),
    table(["metric", "labels", "value#"], rows, {id: "metrics"}));
};

// ---- SQL: POST /query on the same port (kafkalite/sql/http_query.py), streamed ------------------

let sqlQuery = null;       // the running query's AbortController: Cancel, or leaving the page
// The rows a query's table keeps, the last ones: an EMIT CHANGES query left
// open (or a large answer) would otherwise grow the page until the tab dies.
const SQL_ROWS_KEPT = 10000;

// The answer is a JSON array written one element a line as it is computed
// ("[" or "," before an element, "]" at the end, a bare newline while an
// EMIT CHANGES query waits): each element is handed to onElement as soon
// as it is whole (an element is compact JSON, so a prefix never parses).
async function readElements(resp, onElement) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  const take = text => {
    const item = text.trim().replace(/^[\[,]/, "").replace(/[\],]$/, "").trim();
    if (!item) return true;
    let value;
    try { value = JSON.parse(item); } catch (e) { return false; }
    onElement(value);
    return true;
  };
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, {stream: true});
    const lines = buffer.split("\n");
    buffer = lines.pop();
    for (const line of lines) take(line);
    if (take(buffer)) buffer = "";      // the header, before any row or newline follows it
  }
  take(buffer);
}

function sqlCell(v) {
  if (v === null || v === undefined) return el("span", {class: "muted"}, "null");
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

views.sql = async function (main) {
  const form = el("form", {id: "sql-form"},
    el("label", {}, "statement (a topic is a table: partition, offset, timestamp, key, value, " +
                    "headers; EMIT CHANGES follows new records until Cancel)",
       el("textarea", {name: "sql", rows: 4, cols: 100, spellcheck: "false"})),
    el("div", {class: "toolbar"},
       el("button", {type: "submit", id: "sql-run"}, "Run"),
       el("button", {type: "button", class: "plain", id: "sql-cancel", disabled: true},
          "Cancel")));
  const status = el("p", {class: "muted", id: "sql-status"});
  const error = el("p", {class: "sql-error", id: "sql-error", hidden: true});
  const notice = el("p", {class: "muted", id: "sql-notice", hidden: true});
  const results = el("div", {id: "sql-results"});
  const cancel = form.querySelector("#sql-cancel");
  cancel.addEventListener("click", () => { if (sqlQuery) sqlQuery.abort(); });
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    if (sqlQuery) sqlQuery.abort();
    const mine = sqlQuery = new AbortController();
    error.hidden = true;
    notice.hidden = true;
    results.replaceChildren();
    status.textContent = "running";
    cancel.disabled = false;
    let body = null, count = 0;
    const say = message => { error.textContent = message; error.hidden = false; };
    try {
      const resp = await fetch(here("../query"), {
        method: "POST", signal: mine.signal, headers: {"Content-Type": "application/json"},
        body: JSON.stringify({sql: form.sql.value})});
      if (!resp.ok) {
        let data = null;
        try { data = await resp.json(); } catch (e) { /* not JSON */ }
        say((data && data.error) || `${resp.status} ${resp.statusText}`);
        status.textContent = "";
        return;
      }
      await readElements(resp, e => {
        if (e.header) {
          const t = table(e.header.columns, [], {id: "sql-rows"});
          body = t.querySelector("tbody");
          results.replaceChildren(t);
        } else if (e.row && body) {
          body.append(el("tr", {}, e.row.columns.map(v => el("td", {}, sqlCell(v)))));
          if (++count > SQL_ROWS_KEPT) {
            body.firstElementChild.remove();
            notice.textContent = `showing the last ${SQL_ROWS_KEPT} rows`;
            notice.hidden = false;
          }
          status.textContent = `running: ${count} row(s)`;
        } else if (e.error) {
          say(e.error.message);
        }
      });
      status.textContent = `${count} row(s)`;
    } catch (e) {
      if (e.name === "AbortError") status.textContent = `cancelled after ${count} row(s)`;
      else { say(e.message); status.textContent = ""; }
    } finally {
      if (sqlQuery === mine) { sqlQuery = null; cancel.disabled = true; }
    }
  });
  main.append(el("h1", {}, "SQL"), form, status, error, notice, results);
};

// ---- routing ---------------------------------------------------------------------------------

async function route() {
  clearTimeout(timer);
  timer = null;
  if (sqlQuery) sqlQuery.abort();     // a query left running would hold one of the node's slots
  const [path, query] = (location.hash.slice(1) || "/").split("?");
  const q = Object.fromEntries(new URLSearchParams(query || ""));
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const name = parts[0] || "overview";
  const view = views[name];
  const nav = {topic: "topics", group: "groups"}[name] || name;
  document.querySelectorAll("header nav a").forEach(a =>
    a.classList.toggle("active", a.dataset.view === nav));
  const mine = ++generation;
  const view_box = document.getElementById("view");
  const main = el("div", {});     // a stale view fills a detached box, not this one
  view_box.replaceChildren(main);
  delete view_box.dataset.loaded;
  flash(nextFlash, "ok");
  nextFlash = "";
  if (!view) { flash(`no page ${path}`); return; }
  try {
    await view(main, parts[1], q);
  } catch (e) {
    if (mine === generation) flash(e.message);
  }
  if (mine === generation) view_box.dataset.loaded = location.hash;   // tests wait for this
}

window.addEventListener("hashchange", () => route());
route();
