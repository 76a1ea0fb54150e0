// rewind teleop page: shows the session state (server-sent events), streams the camera (MJPEG),
// sends commands (POST /api/command) and the held keys / gamepad sticks (POST /api/input).
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token") || "";
const Q = TOKEN ? "?token=" + encodeURIComponent(TOKEN) : "";
const MODE_TEXT = {
  autonomous: "AUTONOMOUS · the policy is driving",
  paused: "PAUSED · simulation frozen",
  human: "HUMAN · you are driving",
};
const $ = (id) => document.getElementById(id);
let config = { command_keys: {}, input_keys: [], key_help: [] };
let state = null;
const held = new Set();
let padAxes = null;
let padButtons = [];

// ------------------------------------------------------------------ server calls
async function post(path, body) {
  const headers = { "Content-Type": "application/json" };
  if (TOKEN) headers["X-Teleop-Token"] = TOKEN;
  const resp = await fetch(path, { method: "POST", headers, body: JSON.stringify(body) });
  const data = await resp.json().catch(() => ({ error: "HTTP " + resp.status }));
  if (!resp.ok) throw new Error(data.error || "HTTP " + resp.status);
  return data;
}

async function command(cmd, args) {
  // A clicked button keeps the focus: Space or Enter would press it again. Keys drive the robot here.
  if (document.activeElement && document.activeElement.tagName === "BUTTON") document.activeElement.blur();
  try {
    const data = await post("api/command", Object.assign({ cmd }, args || {}));
    showError("");
    render(data.state);
  } catch (err) {
    showError(cmd + ": " + err.message);
  }
}

function sendInput() {
  const body = { keys: Array.from(held) };
  if (padAxes) body.axes = padAxes;
  post("api/input", body).catch((err) => showError("input: " + err.message));
}

function showError(text) {
  $("error").textContent = text;
  $("error").classList.toggle("hidden", !text);
}

// ------------------------------------------------------------------ rendering
function render(s) {
  if (!s || (state && s.version < state.version)) return;
  state = s;
  const banner = $("mode-banner");
  banner.className = "banner mode-" + s.mode;
  banner.dataset.mode = s.mode;
  $("mode-title").textContent = MODE_TEXT[s.mode] || s.mode;
  $("mode-reason").textContent = s.reason;
  if (s.error) showError("server: " + s.error + " (the episode is kept: end, discard or rewind it)");
  const alarm = $("alarm-strip");
  alarm.classList.toggle("hidden", !s.last_alarm);
  if (s.last_alarm) {
    alarm.textContent = `ALARM ×${s.alarms}: ${s.last_alarm.text} at step ${s.last_alarm.step}`;
  }
  const ep = s.episode;
  $("ep-index").textContent = ep.index;
  $("ep-seed").textContent = ep.seed;
  $("ep-step").textContent = ep.step;
  $("ep-max").textContent = ep.max_steps;
  $("ep-stage").textContent = ep.done ? (ep.success ? "SUCCESS" : "over") : ep.stage;
  $("ep-labels").textContent = JSON.stringify(ep.source_counts);
  $("grip").textContent = s.grip;
  $("camera").textContent = s.camera;
  $("committed").textContent = s.committed;
  $("discarded").textContent = s.discarded;
  $("last-commit").textContent = s.last_commit ? `#${s.last_commit.id} ${s.last_commit.outcome} (${s.last_commit.length} steps)` : "-";
  $("btn-takeover").classList.toggle("active", s.mode === "human");
  $("btn-pause").classList.toggle("active", s.mode === "paused");
  $("btn-handback").disabled = !s.has_policy;
  $("auto-pause").checked = s.auto_pause;
  $("auto-pause").disabled = !s.has_monitor;
  $("monitor-line").textContent = s.has_monitor
    ? `threshold ${fmt(s.threshold)} · last score ${s.scores.length ? fmt(s.scores[s.scores.length - 1][2]) : "-"} · alarms ${s.alarms}`
    : "no calibration: no monitor, no alarms";
  renderTimeline(s.checkpoints);
  drawChart(s.scores);
  $("messages").innerHTML = s.messages.slice().reverse().map((m) => `<li>${escapeHtml(m)}</li>`).join("");
}

function renderTimeline(cps) {
  const box = $("timeline");
  const key = JSON.stringify(cps);
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  box.innerHTML = "";
  cps.forEach((cp, i) => {
    const b = document.createElement("button");
    b.textContent = `${cp.name} @${cp.step}`;
    b.title = `rewind to ${cp.name} (similarity ${cp.similarity})`;
    b.dataset.index = cp.index;
    b.className = "checkpoint" + (i === cps.length - 1 ? " latest" : "");
    b.addEventListener("click", () => command("rewind", { target: cp.index, mode: $("rewind-mode").value }));
    box.appendChild(b);
  });
}

function drawChart(points) {
  const c = $("chart");
  const g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  if (!points.length) return;
  const vals = points.flatMap((p) => [p[2], p[3]]).filter((v) => Number.isFinite(v));
  const positive = vals.every((v) => v > 0);
  const tf = positive && Math.max(...vals) / Math.min(...vals) > 100 ? Math.log10 : (v) => v;
  const ys = vals.map(tf);
  const lo = Math.min(...ys), hi = Math.max(...ys) + 1e-12;
  const X = (i) => 5 + (i / Math.max(1, points.length - 1)) * (c.width - 10);
  const Y = (v) => c.height - 5 - ((tf(v) - lo) / (hi - lo)) * (c.height - 10);
  const line = (idx, colour, dash) => {
    g.strokeStyle = colour; g.setLineDash(dash); g.beginPath();
    points.forEach((p, i) => (i ? g.lineTo(X(i), Y(p[idx])) : g.moveTo(X(i), Y(p[idx]))));
    g.stroke();
  };
  line(3, "#e04050", [6, 4]);
  line(2, "#7fd4ff", []);
  g.fillStyle = "#ff3344";
  points.forEach((p, i) => { if (p[2] > p[3]) g.fillRect(X(i) - 2, Y(p[2]) - 2, 4, 4); });
  g.setLineDash([]);
}

const fmt = (v) => (v === null || v === undefined ? "-" : Number(v).toPrecision(3));
const escapeHtml = (t) => t.replace(/[&<>]/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[ch]);

// ------------------------------------------------------------------ keyboard
function onKeyDown(e) {
  if (e.target.closest && e.target.closest("select, input, textarea")) return;
  if (config.input_keys.includes(e.code)) {
    e.preventDefault();
    if (!held.has(e.code)) { held.add(e.code); sendInput(); }
    return;
  }
  const bound = config.command_keys[e.code];
  if (bound) {
    e.preventDefault();
    if (e.repeat) return;
    const args = Object.assign({}, bound.args);
    if (bound.cmd === "rewind") args.mode = $("rewind-mode").value;
    command(bound.cmd, args);
  }
}

function onKeyUp(e) {
  if (config.command_keys[e.code] || config.input_keys.includes(e.code)) e.preventDefault();
  if (held.delete(e.code)) sendInput();
}

function releaseAll() {
  if (held.size) { held.clear(); sendInput(); }
}

// ------------------------------------------------------------------ gamepad (optional)
const PAD_BUTTONS = { 0: ["grip", { value: "toggle" }], 1: ["rewind", {}], 2: ["handback", {}], 3: ["takeover", {}], 9: ["pause", {}] };

function pollGamepad() {
  const pads = navigator.getGamepads ? Array.from(navigator.getGamepads()).filter(Boolean) : [];
  const pad = pads[0];
  if (!pad) { if (padAxes) { padAxes = null; sendInput(); } return; }
  const a = (i) => (pad.axes.length > i && Math.abs(pad.axes[i]) > 0.15 ? pad.axes[i] : 0);
  const axes = [a(0), -a(1), -a(3), -a(2)];
  const moving = axes.some((v) => v !== 0);
  if (moving || padAxes) { padAxes = moving ? axes : null; sendInput(); }
  pad.buttons.forEach((b, i) => {
    if (b.pressed && !padButtons[i] && PAD_BUTTONS[i]) command(PAD_BUTTONS[i][0], PAD_BUTTONS[i][1]);
    padButtons[i] = b.pressed;
  });
}

// ------------------------------------------------------------------ start
async function start() {
  const resp = await fetch("api/config" + Q, { headers: TOKEN ? { "X-Teleop-Token": TOKEN } : {} });
  config = await resp.json();
  $("keys").innerHTML = config.key_help.map(([k, v]) => `<tr><td>${escapeHtml(k)}</td><td>${escapeHtml(v)}</td></tr>`).join("");
  $("view").src = "stream.mjpg" + Q;
  document.querySelectorAll("button[data-cmd]").forEach((b) =>
    b.addEventListener("click", () => command(b.dataset.cmd, b.dataset.args ? JSON.parse(b.dataset.args) : {})));
  $("btn-rewind-latest").addEventListener("click", () => command("rewind", { mode: $("rewind-mode").value }));
  $("auto-pause").addEventListener("change", (e) => command("auto_pause", { value: e.target.checked }));
  window.addEventListener("keydown", onKeyDown);
  window.addEventListener("keyup", onKeyUp);
  window.addEventListener("blur", releaseAll);
  setInterval(() => { if (held.size || padAxes) sendInput(); }, 100);  // keep held input fresh
  setInterval(pollGamepad, 50);
  const events = new EventSource("api/events" + Q);
  events.onmessage = (m) => { $("conn-lost").classList.add("hidden"); render(JSON.parse(m.data)); };
  events.onerror = () => $("conn-lost").classList.remove("hidden");
}

start().catch((err) => showError("could not start: " + err.message));
