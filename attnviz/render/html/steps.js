// attnviz's generate page: the text as it was written, a step at a time (a slider and ← →, in place of the film);
// at each step the token just written is the query and every token so far is coloured by the weight it gives
// it. Plain DOM; every token is put in as text (textContent), never markup. Names follow attnviz's Python.
"use strict";
(function () {
  const { data, style, $, el, cut, cmap } = attnviz;  // page.js
  const run = data.steps;
  const steps = run.steps, n = run.prompt.length, tokens = [...run.prompt, ...run.written];
  const named = (j, chars) => cut(tokens[j], Math.max(1, chars - (run.marks[j] || "").length)) + (run.marks[j] || "");  // the₀, the₄

  function luminance(rgb) {
    const lin = rgb.map((v) => { const c = v / 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); });
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
  }
  function number(w) { return w === null ? "hidden (a sink)" : w !== 0 && w < 0.001 ? w.toExponential(1) : w.toFixed(3); }
  const state = { step: steps.length, key: null };

  const sampling = run.sampling.method === "greedy" ? "greedy" : "sampled (temperature " + run.sampling.temperature + (run.sampling.top_k ? ", top-k " + run.sampling.top_k : "") + ", seed " + run.sampling.seed + ")";
  const stopped = { length: "stopped at --new", end: "stopped at the end-of-sequence token", interrupted: "interrupted" }[run.stopped] || run.stopped;
  const hiding = run.sinks === "hide" ? ["sinks hidden (struck through): each row renormalised without them"] : [];
  $("heading").textContent = ["generate", run.about, n + " prompt tokens", run.written.length + " written (underlined), " + sampling, stopped, ...hiding].join(" · ");
  document.title = "attnviz · generate";
  $("made-text").textContent = JSON.stringify(data.made, null, 2);

  const panel = el("section", null, "steps-page");
  panel.id = "writing";
  panel.setAttribute("aria-label", "the text as it was written");
  $("panels").append(panel);
  if (!steps.length) {
    panel.append(el("p", "Nothing was written: the model ended the text at once.", "muted"));
    document.body.dataset.ready = "yes";
    return;
  }
  const wrap = el("label", null, "control step-control");
  wrap.append(el("span", "Step"));
  const slider = el("input");
  Object.assign(slider, { type: "range", min: "1", max: String(steps.length), value: String(state.step), id: "choose-step" });
  slider.setAttribute("aria-label", "step");
  const count = el("span", "", "step-count");
  wrap.append(slider, count);
  $("controls").append(wrap);
  slider.addEventListener("input", () => choose(+slider.value));
  $("keys-help").textContent = "Keys: ← → a step back or on (Home, End: the first and the last) · Tab to a token for its weight · Esc lets go";

  const text = el("div", null, "written-text");
  const spans = tokens.map((token, j) => {
    const span = el("span", token, "token" + (j >= n ? " written" : ""));
    span.tabIndex = -1;
    span.dataset.key = String(j);
    span.setAttribute("aria-label", "token " + j + ": " + token + (run.marks[j] || "") + (j >= n ? " (written)" : " (prompt)"));
    const activate = () => { state.key = j; readout(); };
    span.addEventListener("mouseenter", activate);
    span.addEventListener("focus", activate);
    span.addEventListener("mouseleave", () => { if (document.activeElement !== span) { state.key = null; readout(); } });
    span.addEventListener("blur", () => { state.key = null; readout(); });
    text.append(span);
    return span;
  });
  panel.append(text);
  const legend = el("div", null, "step-legend");
  const bar = el("canvas", null, "step-bar");
  const ticks = el("div", null, "step-ticks");
  const legendTitle = el("div", "", "muted");
  legend.append(legendTitle, bar, ticks);
  panel.append(legend);

  function drawLegend(entry) {
    const width = Math.min(360, Math.max(200, style.panel * 0.6)), height = Math.round(style.font * 0.9), ratio = window.devicePixelRatio || 1;
    bar.style.width = width + "px"; bar.style.height = height + "px";
    bar.width = Math.round(width * ratio); bar.height = Math.round(height * ratio);
    const ctx = bar.getContext("2d");
    for (let x = 0; x < bar.width; x++) { const c = cmap[Math.round(x / Math.max(1, bar.width - 1) * 255)]; ctx.fillStyle = "rgb(" + c.join(",") + ")"; ctx.fillRect(x, 0, 1, bar.height); }
    ticks.replaceChildren();
    ticks.style.width = width + "px";
    for (const [at, label] of entry.ticks) {  // the end ticks inside the bar's width, the others centred on their place
      const t = el("span", label, "step-tick");
      t.style.left = at * 100 + "%";
      t.style.transform = "translateX(" + (at <= 0 ? 0 : at >= 1 ? -100 : -50) + "%)";
      ticks.append(t);
    }
    legendTitle.textContent = "attention weight" + (entry.scale === "log" ? " (log scale)" : entry.scale === "power" ? " (square-root scale)" : "");
  }
  function readout() {
    const entry = steps[state.step - 1], query = n + state.step - 1;
    let said;
    if (state.key !== null && state.key <= query) {
      said = "token " + state.key + " “" + named(state.key, 40) + "”: weight " + number(entry.weights[state.key]) + " from “" + named(query, 30) + "”";
    } else {
      const top = entry.weights.map((w, j) => [w === null ? -1 : w, j]).sort((a, b) => b[0] - a[0]).slice(0, 5);
      said = "step " + state.step + ": “" + named(query, 30) + "” (token " + query + ") attends most to " + top.map(([w, j]) => "“" + named(j, 20) + "” " + number(w)).join(", ");
    }
    $("readout").textContent = said;
  }
  function draw() {
    const entry = steps[state.step - 1], query = n + state.step - 1;
    spans.forEach((span, j) => {
      const seen = j <= query;
      span.hidden = !seen;
      span.classList.toggle("query", j === query);
      span.classList.toggle("sink-hidden", seen && entry.weights[j] === null);
      span.tabIndex = seen ? 0 : -1;
      if (!seen || entry.weights[j] === null) { span.style.background = ""; span.style.color = ""; return; }
      const c = cmap[Math.round(entry.places[j] * 255)];
      span.style.background = "rgb(" + c.join(",") + ")";
      span.style.color = luminance(c) > 0.179 ? "#000" : "#fff";
    });
    count.textContent = state.step + " of " + steps.length + " · “" + named(query, 24) + "”";
    slider.value = String(state.step);
    $("map-title").textContent = "step " + state.step + ": the weights “" + named(query, 30) + "” gives the text so far";
    drawLegend(entry);
    readout();
    document.body.dataset.shown = String(state.step);
  }
  function choose(step) {
    state.step = Math.max(1, Math.min(steps.length, step));
    if (state.key !== null && state.key > n + state.step - 1) state.key = null;
    draw();
  }
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (target === slider || event.altKey || event.ctrlKey || event.metaKey) return;  // the slider's own keys
    if (event.key === "ArrowLeft" || event.key === "ArrowRight") choose(state.step + (event.key === "ArrowRight" ? 1 : -1));
    else if (event.key === "Home" || event.key === "End") choose(event.key === "Home" ? 1 : steps.length);
    else if (event.key === "Escape") { if (target.blur) target.blur(); state.key = null; readout(); }
    else return;
    event.preventDefault();
  });
  draw();
  document.body.dataset.ready = "yes";
})();
