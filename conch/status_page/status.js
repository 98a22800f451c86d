// The status page's script: reads ui/status.json every few seconds and draws it.
// Every string from the server (model names, reasons, event fields) goes in as text nodes, never
// as HTML. With auth on, the token is kept in this tab's sessionStorage and sent as a Bearer header;
// a 401 asks for it again.
"use strict";

const REFRESH_MS = 3000;
const TOKEN_KEY = "conch.status.token";
const DATA_URL = "ui/status.json";

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function byId(id) {
  return document.getElementById(id);
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function fixed(value, digits) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
}

function ms(value) {
  if (value === null || value === undefined) return "–";
  return value < 10 ? `${value.toFixed(2)} ms` : `${value.toFixed(0)} ms`;
}

function percent(share) {
  return `${(100 * share).toFixed(share > 0 && share < 0.01 ? 2 : 1)}%`;
}

function clock(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour12: false });
}

function stateBadge(state) {
  const kind = { READY: "ok", LOADING: "busy", UNLOADING: "busy", UNAVAILABLE: "bad" }[state] || "off";
  return el("span", { class: `badge ${kind}` }, state);
}

function cell(label, ...children) {
  return el("td", { "data-label": label }, ...children);
}

function modelRow(model) {
  const versions = el("ul", { class: "plain" });
  if (model.versions.length === 0) versions.append(el("li", {}, el("span", { class: "badge off" }, "NOT LOADED")));
  for (const v of model.versions) {
    const item = el("li", {}, v.version ? `v${v.version} ` : "", stateBadge(v.state));
    if (v.reason) item.append(el("div", { class: "reason" }, v.reason));
    versions.append(item);
  }
  for (const r of model.rejected || []) {
    const item = el("li", { class: "rejected" }, `v${r.version} `, el("span", { class: "badge bad" }, "REJECTED"));
    item.append(el("div", { class: "reason" }, `${r.reason}; re-admit with: conch release readmit ${model.name} ${r.version}`));
    versions.append(item);
  }
  const t = model.traffic;
  const errors = t ? el("span", { class: t.failed ? "bad-text" : "" }, percent(t.error_rate), ` (${t.failed})`) : "–";
  const circuits = el("ul", { class: "plain" });
  for (const c of model.circuits) {
    const kind = c.state === "closed" ? "ok" : c.state === "open" ? "bad" : "busy";
    circuits.append(el("li", {}, `v${c.version} `, el("span", { class: `badge ${kind}` }, c.state)));
  }
  if (model.circuits.length === 0) circuits.append(el("li", { class: "muted" }, "none"));
  const fallback = el("ul", { class: "plain" });
  for (const f of model.fallback_now) {
    fallback.append(el("li", {}, el("span", { class: "badge bad" }, `${f.level} now`), ` ${f.reason}`));
  }
  for (const f of model.fallbacks) {
    fallback.append(el("li", {}, `${f.level} (${f.reason}): ${f.answers}`));
  }
  if (fallback.childElementCount === 0) fallback.append(el("li", { class: "muted" }, "none"));
  return el(
    "tr",
    { "data-model": model.name },
    cell("Model", el("strong", {}, model.name)),
    cell("Versions", versions),
    cell("Requests/s", t ? fixed(t.rate, 2) : "–"),
    cell("P50", t ? ms(t.p50_ms) : "–"),
    cell("P95", t ? ms(t.p95_ms) : "–"),
    cell("Errors", errors),
    cell("Circuit", circuits),
    cell("Fallback", fallback),
  );
}

function weights(release) {
  const bar = el("div", { class: "weights" });
  for (const [version, weight] of Object.entries(release.weights)) {
    const role = Number(version) === release.candidate ? "candidate" : "baseline";
    const part = el("span", { class: `weight ${role}` }, `v${version} ${weight}%`);
    part.style.flexGrow = String(Math.max(Number(weight), 0.0001));
    bar.append(part);
  }
  return bar;
}

function releaseCard(release) {
  const gate = release.gate || { checks: [] };
  const checks = el("table", { class: "checks" }, el("thead", {}, el("tr", {}, el("th", {}, "Gate check"), el("th", {}, "Value"), el("th", {}, "Limit"), el("th", {}, "Outcome"))));
  const body = el("tbody");
  for (const c of gate.checks) {
    const outcome = c.detail ? `${c.outcome}: ${c.detail}` : c.outcome;
    const noise = c.noise === null || c.noise === undefined ? "" : ` (noise ${fixed(c.noise, 3)})`;
    body.append(el("tr", {}, cell("Gate check", c.name), cell("Value", fixed(c.value, 3) + noise), cell("Limit", fixed(c.limit, 3)), cell("Outcome", outcome)));
  }
  if (gate.checks.length === 0) body.append(el("tr", {}, el("td", { colspan: "4", class: "muted" }, "no judgement yet")));
  checks.append(body);
  const history = el("ol", { class: "events" });
  for (const h of [...release.history].reverse().slice(0, 10)) {
    history.append(el("li", {}, el("time", {}, clock(h.time)), ` ${h.event} → ${h.state}`, h.reason ? ` (${h.reason})` : ""));
  }
  const step = release.step === null ? "–" : `${release.step} of ${release.spec.steps.length}`;
  const shadow = release.shadow_figures || {};
  return el(
    "article",
    { class: "release", "data-model": release.model },
    el("h3", {}, release.model, " ", el("span", { class: "badge busy" }, release.state)),
    el("p", {}, `v${release.baseline} → v${release.candidate}, step ${step}`, `, gate: ${gate.judge}, failures ${gate.consecutive_failures}/${gate.failure_threshold}`),
    weights(release),
    ...(release.waiting_for || []).map((w) => el("p", { class: "muted" }, `waiting: ${w}`)),
    release.approvals ? el("p", {}, `approvals ${release.approvals.have} of ${release.approvals.needed}${release.approvals.by.length ? " (" + release.approvals.by.join(", ") + ")" : ""}`) : null,
    shadow.compared ? el("p", { class: "muted" }, `shadow: ${shadow.agreements}/${shadow.compared} agree, ${shadow.dropped} dropped`) : null,
    checks,
    el("h4", {}, "History"),
    history,
  );
}

function fieldText(value) {
  if (value === null || value === "") return "–";
  if (Array.isArray(value)) return value.length ? value.join(",") : "none";
  return String(value);
}

function eventItem(event) {
  const fields = Object.entries(event.fields).filter(([key]) => key !== "model");
  const model = event.fields.model;
  return el(
    "li",
    { class: `event ${event.severity}`, "data-event": event.event },
    el("time", {}, clock(event.time)),
    " ",
    el("strong", {}, event.event),
    model !== undefined ? el("span", { class: "model" }, ` ${model}`) : null,
    fields.length ? el("span", { class: "muted" }, " " + fields.map(([k, v]) => `${k}=${fieldText(v)}`).join(" ")) : null,
  );
}

function streamRow(stream) {
  const reasons = Object.entries(stream.dead_letters).filter(([, count]) => count > 0);
  const dead = reasons.length ? reasons.map(([reason, count]) => `${reason} ${count}`).join(", ") : "0";
  const broker = stream.broker_up ? el("span", { class: "badge ok" }, "up") : el("span", { class: "badge bad" }, "unreachable");
  return el(
    "tr", {},
    cell("Stream", el("strong", {}, stream.stream), el("span", { class: "muted" }, ` → ${stream.results}`)),
    cell("Model", stream.model),
    cell("Broker", broker, stream.paused ? el("span", { class: "muted" }, ` paused: ${stream.paused}`) : null),
    cell("Lag", stream.lag === null ? "–" : String(stream.lag)),
    cell("Records/s", fixed(stream.records_per_s, 1)),
    cell("Results", String(stream.records.result || 0)),
    cell("Dead letters", dead),
  );
}

function draw(status) {
  const server = status.server;
  byId("server").replaceChildren(`${server.name} ${server.version} `, el("span", { class: `badge ${server.ready ? "ok" : "bad"}` }, server.ready ? "ready" : "not ready"));
  byId("updated").textContent = `updated ${clock(server.time)}`;
  byId("window").textContent = `Requests, latency and errors over the last ${Math.round(status.window_s / 60)} minutes (or since the server started).`;
  const rows = byId("models").tBodies[0];
  rows.replaceChildren(...status.models.map(modelRow));
  if (status.models.length === 0) rows.append(el("tr", {}, el("td", { colspan: "8", class: "muted" }, "no models")));
  const streams = status.streams || [];
  byId("streams-section").hidden = streams.length === 0;
  byId("streams").tBodies[0].replaceChildren(...streams.map(streamRow));
  const releases = byId("releases");
  releases.replaceChildren(...status.releases.map(releaseCard));
  if (status.releases.length === 0) releases.append(el("p", { class: "muted" }, "No release in progress."));
  const events = byId("events");
  events.replaceChildren(...status.events.map(eventItem));
  if (status.events.length === 0) events.append(el("li", { class: "muted" }, "no events yet"));
}

function askForToken(reason) {
  document.body.classList.add("locked"); // no empty tables under the prompt
  byId("server").textContent = "token needed";
  byId("updated").textContent = "";
  byId("login-reason").textContent = reason;
  byId("login").hidden = false;
  byId("token").focus();
}

function showProblem(text) {
  const problem = byId("problem");
  problem.textContent = text;
  problem.hidden = !text;
}

let timer = null;

async function refresh() {
  clearTimeout(timer);
  const headers = { Accept: "application/json" };
  const held = token();
  if (held) headers.Authorization = `Bearer ${held}`;
  byId("forget").hidden = !held;
  try {
    const reply = await fetch(DATA_URL, { headers, cache: "no-store" });
    if (reply.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      byId("forget").hidden = true;
      askForToken(held ? "That token was refused (expired or not valid for this server). Enter another one." : "This server asks for a bearer token with the infer scope.");
      showProblem("");
      return; // no refresh until a token is given
    }
    if (!reply.ok) {
      const body = await reply.json().catch(() => ({}));
      showProblem(`The server answered ${reply.status}: ${body.error || reply.statusText}`);
    } else {
      byId("login").hidden = true;
      document.body.classList.remove("locked");
      showProblem("");
      draw(await reply.json());
    }
  } catch (error) {
    showProblem(`Cannot reach the server (${error.message}); retrying.`);
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  byId("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const given = byId("token").value.trim();
    byId("token").value = "";
    if (given) sessionStorage.setItem(TOKEN_KEY, given);
    refresh();
  });
  byId("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    refresh();
  });
  refresh();
});
