// attnviz's flow page: the information-flow routes as a graph — tokens along the bottom, layers up the side, each
// edge as wide as its share (Ferrando & Voita's figures). The threshold is the reader's (a slider), and a click (or
// Enter) on any node follows the routes into that node instead. The route graph is computed here as
// attnviz.analysis.flow.route_graph computes it, from the shares the page holds (up to 512 tokens; past that the
// page draws the graph as written). Plain DOM and SVG; every token goes in as text. Names follow attnviz's Python.
"use strict";
(function () {
  const { data, style, $, el, cut } = attnviz;  // page.js
  const flow = data.flow;
  const n = flow.tokens.length, layers = flow.layers;
  const shares = Array.isArray(flow.attention);
  const state = { threshold: flow.threshold, start: ["pre", layers, flow.position] };
  const SVG = "http://www.w3.org/2000/svg";
  const svgEl = (tag, attrs) => { const node = document.createElementNS(SVG, tag); for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v)); return node; };

  function routeGraph(start, threshold) {  // [layer, kind, source, target, share] as route_graph gives them
    const edges = [], seen = new Set([start.join()]), todo = [start];
    function keep(parts, layer, target) {
      const kept = parts.filter((p) => p[2] > threshold);
      const total = kept.reduce((s, p) => s + p[2], 0);
      for (const [kind, source, weight, node] of kept) {
        edges.push([layer, kind, source, target, weight / total]);
        if (!seen.has(node.join())) { seen.add(node.join()); todo.push(node); }
      }
    }
    while (todo.length) {
      const [stage, layer, i] = todo.shift();
      if (stage === "pre" && layer > 0) {
        const ffn = flow.ffn[layer - 1][i], mid = ["mid", layer - 1, i];
        keep([["ffn", i, ffn, mid], ["skip", i, 1 - ffn, mid]], layer - 1, i);
      } else if (stage === "mid") {
        const parts = [["residual", i, flow.residual[layer][i], ["pre", layer, i]]];
        flow.attention[layer][i].forEach((w, j) => parts.push(["attention", j, w, ["pre", layer, j]]));
        keep(parts, layer, i);
      }
    }
    return edges;
  }

  $("heading").textContent = flow.heading.join(" · ");
  document.title = "attnviz · flow";
  $("made-text").textContent = JSON.stringify(data.made, null, 2);
  $("keys-help").textContent = shares
    ? "Move the threshold; click a node (or Tab to it and press Enter) to follow the routes into it · Esc: back to the last position"
    : "More than 512 tokens: the page draws the route graph as it was written (the JSON keeps its edges alone)";
  const wrap = el("label", null, "control");
  wrap.append(el("span", "Threshold"));
  const slider = el("input");
  Object.assign(slider, { type: "range", min: "0.01", max: "0.5", step: "0.01", value: String(state.threshold), id: "threshold", disabled: !shares });
  slider.setAttribute("aria-label", "threshold");
  const shown = el("span", state.threshold.toFixed(2));
  wrap.append(slider, shown);
  $("controls").append(wrap);
  slider.addEventListener("input", () => { state.threshold = +slider.value; shown.textContent = state.threshold.toFixed(2); draw(); });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") { state.start = ["pre", layers, flow.position]; draw(); } });

  const panel = el("section", null, "flow-page");
  panel.id = "routes";
  panel.setAttribute("aria-label", "the routes");
  $("panels").append(panel);
  const font = style.font;

  function readout(text) { $("readout").textContent = text; }

  function draw() {
    const edges = shares ? routeGraph(state.start, state.threshold) : flow.edges;
    const used = [...new Set([state.start[2], ...edges.flatMap((e) => [e[2], e[3]])])].sort((a, b) => a - b);
    const column = new Map(used.map((i, c) => [i, c]));
    const pitch = Math.max(font * 4.5, Math.min(font * 9, 900 / Math.max(1, used.length)));
    const rise = Math.max(font * 1.2, Math.min(font * 3, 700 / Math.max(1, layers)));
    const left = font * 4, top = font, bottom = font * 9;
    const width = left + pitch * used.length, height = top + rise * layers + bottom;
    const x = (i) => left + pitch * (column.get(i) + 0.5), y = (level) => top + rise * (layers - level);
    const svg = svgEl("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "routes" });
    for (let k = 0; k <= layers; k += Math.max(1, Math.floor(layers / 12))) {
      const label = svgEl("text", { x: left - font * 0.6, y: y(k) + font * 0.35, "text-anchor": "end", fill: style.colours.text, "font-size": font * 0.8 });
      label.textContent = k === layers ? "out" : String(k);
      svg.append(label);
    }
    const nodes = new Map();
    for (const [layer, kind, source, target, share] of edges) {
      const low = kind === "attention" || kind === "residual" ? layer : layer + 0.5;
      const from = [source, low], to = [target, low + 0.5];
      const moving = kind === "attention" && source !== target;
      const line = svgEl("line", { x1: x(from[0]), y1: y(from[1]), x2: x(to[0]), y2: y(to[1]), stroke: moving ? "#b2182b" : "#999999",
        "stroke-width": 0.5 + 5 * share, "stroke-opacity": moving ? 0.85 : 0.6, "stroke-linecap": "round" });
      line.addEventListener("mouseenter", () => readout(`layer ${layer} · ${kind} · ${source} ${flow.tokens[source]} → ${target} ${flow.tokens[target]} · share ${share.toFixed(3)}`));
      svg.append(line);
      for (const [i, level] of [from, to]) nodes.set(i + "," + level, [i, level]);
    }
    nodes.set(state.start[2] + "," + (state.start[0] === "mid" ? state.start[1] + 0.5 : state.start[1]), [state.start[2], state.start[0] === "mid" ? state.start[1] + 0.5 : state.start[1]]);
    for (const [i, level] of nodes.values()) {
      const stage = Number.isInteger(level) ? "pre" : "mid", layer = Math.floor(level);
      const isStart = stage === state.start[0] && layer === state.start[1] && i === state.start[2];
      const dot = svgEl("circle", { cx: x(i), cy: y(level), r: isStart ? font * 0.45 : font * 0.25, fill: isStart ? "#b2182b" : style.colours.text, tabindex: shares ? 0 : -1 });
      const name = (stage === "pre" ? (layer === layers ? "the output" : `the stream entering layer ${layer}`) : `layer ${layer} after attention`) + ` at ${i} ${flow.tokens[i]}`;
      dot.setAttribute("aria-label", name);
      const follow = () => { if (shares) { state.start = [stage, layer, i]; draw(); readout("routes into " + name); } };
      dot.addEventListener("click", follow);
      dot.addEventListener("keydown", (e) => { if (e.key === "Enter") follow(); });
      dot.addEventListener("mouseenter", () => readout(name));
      svg.append(dot);
    }
    used.forEach((i) => {
      const label = svgEl("text", { x: x(i), y: y(0) + font * 1.2, fill: style.colours.text, "font-size": font * 0.8,
        transform: `rotate(-60 ${x(i)} ${y(0) + font * 1.2})`, "text-anchor": "end" });
      label.textContent = i + " " + cut(flow.tokens[i], 12);
      svg.append(label);
    });
    panel.replaceChildren(svg, el("p", `${edges.length} edges; red: attention between positions, grey: within a position; width: share`, "muted"));
  }
  draw();
  document.body.dataset.ready = "yes";
})();
