// attnviz's explain page: one query through one head, step by step, as the explain figure shows it — q and the
// keys, q·k_j, scaled (soft-capped) and masked, the softmax's weights, the values and w_j v_j, their sum o and the
// layer's output row — for every query the page holds (a menu and ← →). Plain DOM and canvas; every token is
// put in as text (textContent), never markup. Names follow attnviz's Python (query, key, weight, values).
"use strict";
(function () {
  const { data, style, $, el, cut, rgbOf, cmap } = attnviz;  // page.js
  const ex = data.explain;
  const diverging = ex.diverging.map(rgbOf);
  const state = { at: ex.start, key: null };

  function fixed(v, digits) { return v === null ? "masked" : (Math.abs(v) < 0.005 && v !== 0 && digits <= 2 ? v.toExponential(0) : v.toFixed(digits)).replace("-", "−"); }
  const rgb = (c) => "rgb(" + c.join(",") + ")";
  function component(v) {  // render.explain's RdBu_r from −limit to +limit
    const pos = Math.max(0, Math.min(1, (v / ex.limit + 1) / 2));
    return diverging[Math.round(pos * 255)];
  }

  // ---- strips of components: one canvas per vector, a cell per component ----
  const rowH = Math.round(style.font * 1.55);
  function stripWidth(count) {  // three strips a row, beside the key and three bars of 9em: all within the window
    const room = Math.min(style.panel * 0.42, (window.innerWidth - style.font * 44) / 3);
    return count * Math.max(2, Math.min(14, Math.floor(Math.max(96, room) / count)));
  }
  function strip(values, width, height, title) {
    const canvas = el("canvas", null, "strip");
    const ratio = window.devicePixelRatio || 1;
    canvas.style.width = width + "px"; canvas.style.height = height + "px";
    canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio);
    if (title) canvas.title = title;
    paint(canvas, values);
    return canvas;
  }
  function paint(canvas, values) {
    const ctx = canvas.getContext("2d"), w = canvas.width / values.length;
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    values.forEach((v, k) => { ctx.fillStyle = rgb(component(v)); ctx.fillRect(Math.floor(k * w), 0, Math.ceil(w), canvas.height); });
  }

  // ---- bars: q·k_j, the scaled scores and the weights, a zero line where the column's values need it ----
  function range(values) {
    const finite = values.filter((v) => v !== null);
    return [Math.min(0, ...finite), Math.max(0, ...finite, 1e-12)];
  }
  function setBar(cell, v, span, weights) {
    const [lo, hi] = span, track = cell.firstChild, bar = track.firstChild, zero = (-lo / (hi - lo)) * 100;
    cell.lastChild.textContent = fixed(v, 2);
    cell.classList.toggle("masked", v === null);
    if (v === null) { bar.style.width = "0"; return; }
    const at = (v - lo) / (hi - lo) * 100;
    bar.style.left = Math.min(zero, at) + "%"; bar.style.width = Math.max(Math.abs(at - zero), 0.5) + "%";
    bar.style.background = weights ? rgb(cmap[Math.round(Math.min(1, Math.max(0, v)) * 255)]) : "var(--muted)";
    track.style.setProperty("--zero", zero + "%");
  }

  // ---- the page: heading, the query menu, the table of keys ----
  const m = ex.keys.length, shown = ex.key_vectors[0] ? ex.key_vectors[0].length : 0;
  const width = stripWidth(shown), height = rowH - 6;
  const qi = () => ex.queries[state.at];
  const symbols = ex.own ? ["q", "k_j", "v_j"] : ["q = x_i W_Q", (ex.cross ? "k_j = c_j W_K" : "k_j = x_j W_K"), (ex.cross ? "v_j = c_j W_V" : "v_j = x_j W_V")];
  const cutNote = shown < ex.d_k ? " (first " + shown + " of " + ex.d_k + ")" : "";
  const named = (tokens, marks, j, chars) => (chars ? cut(tokens[j], Math.max(1, chars - marks[j].length)) : tokens[j]) + marks[j];  // the₄
  const query = (i, chars) => named(ex.tokens, ex.query_marks, i, chars), key = (j, chars) => named(ex.keys, ex.key_marks, j, chars);
  const panel = el("section", null, "explain");
  panel.id = "explain";
  panel.setAttribute("aria-label", "one query step by step");
  $("panels").append(panel);

  const controls = $("controls");
  const wrap = el("label", null, "control");
  wrap.append(el("span", "Query"));
  const select = el("select");
  select.id = "choose-query";
  ex.queries.forEach((entry, k) => { const o = el("option", entry.query + ": " + query(entry.query, 24)); o.value = String(k); select.append(o); });
  select.value = String(state.at);
  select.addEventListener("change", () => choose(+select.value));
  wrap.append(select);
  controls.append(wrap);
  if (!ex.every) controls.append(el("span", "this page holds the chosen query only: every query's steps would make it too large (explain --query N writes another)", "muted only-one"));
  $("keys-help").textContent = "Keys: " + (ex.queries.length > 1 ? "← → query · " : "") + "Tab to a key, then ↑ ↓ along the keys · Esc lets go";

  const qLine = el("div", null, "q-line");
  const qTitle = el("span", "", "step-title");
  const qStrip = strip(qi().q, width, height);
  qLine.append(qTitle, qStrip);
  panel.append(qLine);

  const scaled = "× " + ex.scale.toPrecision(3) + (ex.softcap ? ", " + ex.softcap + "·tanh(·/" + ex.softcap + ")" : "") + " + mask";
  const table = el("div", null, "steps");
  table.style.gridTemplateColumns = "auto " + width + "px repeat(3, minmax(9em, auto)) " + width + "px " + width + "px";
  for (const title of ["key", "keys " + symbols[1] + cutNote, "q·k_j", scaled, "softmax → w_j", "values " + symbols[2], "w_j v_j"])
    table.append(el("div", title, "step-title head"));
  const rows = [];
  for (let j = 0; j < m; j++) {
    const label = el("div", key(j, 18), "key-token");
    label.tabIndex = 0;
    label.dataset.key = String(j);
    label.setAttribute("role", "button");
    label.setAttribute("aria-label", "key " + j + ": " + key(j));
    const bars = [0, 1, 2].map(() => {
      const c = el("div", null, "bar-cell"), track = el("div", null, "track");
      track.append(el("div", null, "bar"));
      c.append(track, el("span", "", "bar-number"));
      return c;
    });
    const weighted = strip(ex.values[j].map(() => 0), width, height);
    table.append(label, strip(ex.key_vectors[j], width, height, "k_" + j), ...bars, strip(ex.values[j], width, height, "v_" + j), weighted);
    const activate = () => { state.key = j; readout(); mark(); };
    label.addEventListener("mouseenter", activate);
    label.addEventListener("focus", activate);
    label.addEventListener("blur", () => { state.key = null; mark(); });
    rows.push({ label, bars, weighted });
  }
  panel.append(table);
  const oLine = el("div", null, "o-line");
  oLine.style.gridTemplateColumns = "auto " + width + "px";
  const oStrip = strip(qi().head_output, width, height);
  oLine.append(el("span", "o = Σ_j w_j v_j, the sums of the columns of w_j v_j", "step-title"), oStrip);
  panel.append(oLine);
  const yTitle = el("div", "", "step-title");
  const yStrip = strip(qi().output, Math.min(ex.d_model * 6, Math.max(width * 3, 480)), height);
  panel.append(yTitle, yStrip);
  const legend = el("div", null, "component-legend");
  const bar = strip(Array.from({ length: 64 }, (_, k) => (k / 63 * 2 - 1) * ex.limit), 160, Math.round(style.font * 0.8));
  legend.append(el("span", fixed(-ex.limit, 2)), bar, el("span", fixed(ex.limit, 2)), el("span", "component value (every strip)", "muted"));
  panel.append(legend);

  function readout() {
    const e = qi(), j = state.key;
    if (j === null) return;
    const said = "key " + j + " “" + key(j, 40) + "”: q·k_j " + fixed(e.dots[j], 3) + " · " + scaled + " → " + fixed(e.scores[j], 3) +
      (e.scores[j] === null ? "" : " · w_j " + fixed(e.weights[j], 4));
    $("readout").textContent = said;
  }
  function mark() { rows.forEach((r, j) => r.label.classList.toggle("active", state.key === j)); }
  function draw() {
    const e = qi(), i = e.query;
    const token = query(i, 30);
    $("heading").textContent = ["query " + i + " “" + token + "”", "head " + ex.head, ...ex.heading].join(" · ");
    $("map-title").textContent = "query " + i + " “" + token + "” · head " + ex.head;
    document.title = "attnviz · explain query " + i;
    qTitle.textContent = symbols[0] + ", the query “" + token + "”" + cutNote;
    paint(qStrip, e.q);
    const spans = [range(e.dots), range(e.scores), [0, 1]];
    rows.forEach((r, j) => {
      setBar(r.bars[0], e.dots[j], spans[0], false);
      setBar(r.bars[1], e.scores[j], spans[1], false);
      setBar(r.bars[2], e.scores[j] === null ? null : e.weights[j], spans[2], true);
      r.label.classList.toggle("masked", e.scores[j] === null);
      paint(r.weighted, ex.values[j].map((v) => v * (e.weights[j] || 0)));
    });
    paint(oStrip, e.head_output);
    yTitle.textContent = "the layer's output row y_" + i + " = [o_0; …; o_" + (ex.heads - 1) + "] W_O (d_model " + ex.d_model + ")";
    paint(yStrip, e.output);
    readout();
    document.body.dataset.shown = String(i);
  }
  function choose(k) {
    state.at = Math.max(0, Math.min(ex.queries.length - 1, k));
    select.value = String(state.at);
    draw();
  }
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (target instanceof HTMLSelectElement || event.altKey || event.ctrlKey || event.metaKey) return;
    if (event.key === "ArrowLeft" || event.key === "ArrowRight") choose(state.at + (event.key === "ArrowRight" ? 1 : -1));
    else if ((event.key === "ArrowUp" || event.key === "ArrowDown") && target.dataset && target.dataset.key) {
      const next = rows[+target.dataset.key + (event.key === "ArrowDown" ? 1 : -1)];
      if (next) next.label.focus();
    } else if (event.key === "Escape") { if (target.blur) target.blur(); state.key = null; mark(); }
    else return;
    event.preventDefault();
  });
  $("made-text").textContent = JSON.stringify(data.made, null, 2);
  draw();
  document.body.dataset.ready = "yes";
})();
