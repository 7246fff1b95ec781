// attnviz's page: one layer and head at a time as a heatmap (canvas) and as lines (SVG), every map of a
// model as tiles. Plain DOM; every token, name and label is put in as text (textContent), never markup.
// Names follow attnviz's Python: part, layer, head, query, key, weight.
"use strict";
(function () {
  const { data, style, $, el, cut, rgbOf, cmap } = attnviz;  // page.js
  const SVG = "http://www.w3.org/2000/svg";
  const SCALE_NAMES = { linear: "", log: " (log scale)", power: " (square-root scale)" };
  const SCALE_PHRASE = { linear: "", log: "log colour scale", power: "square-root colour scale" };

  const start = data.start;
  const state = {
    part: start.part, layer: start.layer, head: start.head, scale: start.scale || "auto",
    sinks: start.sinks, sentences: "all", active: null, hover: null,
    heads: start.heads || [start.head],  // the head view's heads overlaid (bertviz's), each in its colour
  };

  // ---- the theme and preset: CSS variables (the style's own rules read them) ----

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }
  function ordinal(k) {
    const suffix = k % 100 >= 10 && k % 100 <= 20 ? "th" : ({ 1: "st", 2: "nd", 3: "rd" })[k % 10] || "th";
    return k + suffix;
  }
  function plural(count, noun) { return count + " " + noun + (count === 1 ? "" : "s"); }
  function tickStep(count, lengthPx, fontPx) {  // render.figure.tick_step: every k-th label, so none overlap
    const fits = Math.max(1, Math.floor(lengthPx / (fontPx * 1.15) + 1e-6));
    return Math.max(1, Math.ceil(count / fits));
  }

  // ---- the data: parts, layers, maps, decoded when first shown ----
  data.parts.forEach((p, k) => { p.id = "p" + k; if (p.exact) p.exact.id = "x" + k; });
  if (start.together)  // a command without --head: each layer's sinks (and their scale) found over its maps together,
    // as the figure of every head finds them; else each map's own, as the figure of that head
    for (const p of data.parts) for (const layer of p.layers) for (const entry of layer.maps) if (layer.together) Object.assign(entry, layer.together);
  const part = () => data.parts[state.part];
  function shown() {  // the map drawn: the chosen one, or its every-token copy when the page holds one (pooled pages)
    const p = part(), exact = p.exact;
    if (exact && exact.at[0] === state.layer && exact.at[1] === state.head) return { p: exact, layer: 0, head: 0 };
    return { p, layer: state.layer, head: state.head };
  }
  const layerOf = () => part().layers[state.layer];
  const queries = (p) => p.queries;
  const keys = (p) => p.keys || p.queries;
  const pooled = (p) => !!p.pooled;
  function scaleOf(p, entry) {  // auto: the model view's one scale for every map, as its figure; else each map's own
    const which = state.sinks === "hide" ? 1 : 0;
    if (state.scale !== "auto") return state.scale;
    if (data.view === "model" && part().model_scales) return part().model_scales[which];
    return entry && entry.scales ? entry.scales[which] : p.scale;
  }
  function named(p, side, index, chars) {  // a token as the terminal names it (render.labels.distinct_labels): cut to
    // ``chars``, then its position where the page shows it more than once ("the₄"), as the data marks it
    const token = side === "query" ? queries(p)[index] : keys(p)[index];
    const mark = ((side === "query" ? p.query_marks : p.key_marks || p.query_marks) || [])[index] || "";
    return (chars ? cut(token, Math.max(1, chars - mark.length)) : token) + mark;
  }
  const hiddenColumns = (p, entry) => (pooled(p) ? [] : hiddenKeys(p, entry));  // drawn as the figures draw them: hatched

  const lut = new Float64Array(256);
  for (let q = 1; q < 256; q++) lut[q] = Math.exp(Math.log(data.quantised_floor) * (1 - (q - 1) / 254));

  function bytesOf(b64) {
    const text = atob(b64);
    const out = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
    return out;
  }
  const cache = new Map();
  function remember(key, make) {
    if (cache.has(key)) { const v = cache.get(key); cache.delete(key); cache.set(key, v); return v; }
    const value = make();
    cache.set(key, value);
    if (cache.size > 24) cache.delete(cache.keys().next().value);
    return value;
  }
  function mask(p, layer) {
    const index = p.layers[layer].mask;
    if (index === null || index === undefined) return null;
    return remember("mask " + p.id + " " + index, () => {
      const packed = bytesOf(p.masks[index]);
      const n = queries(p).length, m = keys(p).length, out = new Uint8Array(n * m);
      for (let k = 0; k < n * m; k++) out[k] = (packed[k >> 3] >> (7 - (k & 7))) & 1;
      return out;
    });
  }
  function hiddenKeys(p, entry) {  // the keys hidden from a map: by its source (pooled), or by the page
    if (entry.hidden.length) return entry.hidden;
    if (state.sinks === "hide" && !pooled(p)) return entry.sinks.map((s) => s.key);
    return [];
  }
  function weights(p, layer, head) {
    const entry = p.layers[layer].maps[head];
    const hide = hiddenKeys(p, entry);
    return remember([p.id, layer, head, hide.join(",")].join(" "), () => {
      const raw = bytesOf(entry.weight);
      let w;
      if (p.encoding === "f32") w = new Float64Array(new Float32Array(raw.buffer));
      else { w = new Float64Array(raw.length); for (let k = 0; k < raw.length; k++) w[k] = lut[raw[k]]; }
      if (hide.length && !entry.hidden.length) withoutKeys(w, keys(p).length, hide);
      return w;
    });
  }
  function withoutKeys(w, m, hidden) {  // structure.without_keys: the keys set to 0, each row renormalised
    for (let row = 0; row < w.length; row += m) {
      let left = 0;
      for (let j = 0; j < m; j++) if (!hidden.includes(j)) left += w[row + j];
      if (left <= 0) continue;
      for (let j = 0; j < m; j++) w[row + j] = hidden.includes(j) ? 0 : w[row + j] / left;
    }
  }

  // ---- colour: structure.colour_values and scale_ticks ----
  function position(weight, scale, floor) {
    const w = Math.min(1, Math.max(0, weight));
    if (scale === "log") { const low = Math.log10(floor); return Math.min(1, Math.max(0, (Math.log10(Math.max(w, floor)) - low) / -low)); }
    if (scale === "power") return Math.sqrt(w);
    return w;
  }
  function colour(pos) { return cmap[Math.min(255, Math.max(0, Math.round(pos * 255)))]; }
  function ticks(scale, floor) {
    if (scale === "log") {
      const low = Math.log10(floor), out = [];
      const sup = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };
      for (let p = Math.ceil(low); p <= 0; p++) out.push([(p - low) / -low, p ? "10" + String(p).split("").map((ch) => sup[ch]).join("") : "1"]);
      return out;
    }
    if (scale === "power") return [[0, "0"], [Math.sqrt(0.05), "0.05"], [0.5, "0.25"], [Math.sqrt(0.5), "0.50"], [1, "1.00"]];
    return [[0, "0.00"], [0.25, "0.25"], [0.5, "0.50"], [0.75, "0.75"], [1, "1.00"]];
  }
  function luminance(rgb) {
    const lin = rgb.map((v) => { const c = v / 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); });
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
  }
  function number(weight) {
    const approx = shown().p.encoding === "u8" && weight > 0 ? "≈" : "";
    if (weight !== 0 && weight < 0.001) return approx + weight.toExponential(1);
    return approx + weight.toFixed(3);
  }

  // ---- what is shown: rows and columns (a sentence pair's filter), the heading ----
  function ranges() {
    const p = shown().p, n = queries(p).length, m = keys(p).length, b = p.sentence_b_start;
    const a = [0, b], bb = [b, n];
    switch (state.sentences) {
      case "aa": return { rows: a, cols: [0, b] };
      case "bb": return { rows: bb, cols: [b, m] };
      case "ab": return { rows: a, cols: [b, m] };
      case "ba": return { rows: bb, cols: [0, b] };
      default: return { rows: [0, n], cols: [0, m] };
    }
  }
  function sinkPhrase(p, entry) {
    if (hiddenKeys(p, entry).length) return entry.said.hide;  // as the figure's heading words it (render.labels.sinks_said)
    if (state.sinks === "mark" && entry.sinks.length) return entry.said.mark;
    return "";
  }
  let labelNote = "";
  function drawHeading() {
    const { p, layer: l, head } = shown(), layer = p.layers[l], entry = layer.maps[head];
    const parts = [...layer.heading];
    const whole = part().pooled;
    if (p !== part()) parts.push("this map at every token (the others " + whole.method + "-pooled into " + whole.bins + " × " + whole.bins + " bins)");
    const overlaid = data.view === "lines" ? drawn().maps : [];
    const sink = overlaid.length > 1 ? overlaidSinks(p, overlaid) : sinkPhrase(p, entry);
    if (sink) parts.push(sink);
    if (!pooled(p) && data.view !== "lines" && SCALE_PHRASE[scaleOf(p, entry)]) parts.push(SCALE_PHRASE[scaleOf(p, entry)]);
    if (data.view === "lines") parts.push(data.lines_said);  // as the lines figure's heading
    if (selects.scale) selects.scale.options[0].textContent = "auto (" + scaleOf(p, entry) + ")";
    if (p.encoding === "u8") parts.push(data.precision);
    if (labelNote) parts.push(labelNote);
    $("heading").textContent = parts.join(" · ");
    const title = data.view === "lines" && overlaid.length !== 1 ? overlaidTitle() : entry.label;
    $("map-title").textContent = (p.name ? p.name + " · " : "") + title;
    document.title = "attnviz · " + title;
  }
  function overlaidSinks(p, maps) {  // the heads' sinks phrases: once when they agree, else each with its heads
    const heads = new Map();
    for (const map of maps) {
      const phrase = sinkPhrase(p, p.layers[map.layer].maps[map.head]);
      if (!heads.has(phrase)) heads.set(phrase, []);
      heads.get(phrase).push(map.head);
    }
    if (heads.size === 1) return [...heads.keys()][0];
    return [...heads].filter(([phrase]) => phrase).map(([phrase, hs]) => phrase + " (head" + (hs.length > 1 ? "s " : " ") + hs.join(", ") + ")").join("; ");
  }
  function overlaidTitle() {  // "layer 1 · heads 2 and 5 overlaid"
    const labels = layerOf().maps.map((mp) => mp.label), first = labels[0].split(" · ");
    const layer = first.length > 1 ? first[0] + " · " : "";
    if (!state.heads.length) return layer + "no head chosen: click a head's colour";
    if (state.heads.length === labels.length) return layer + "all " + labels.length + " heads overlaid";
    const names = state.heads.map((h) => shortLabel(labels[h]).replace(/^head /, ""));  // as render.labels.shortened
    if (names.length > 8) return layer + "heads " + names.slice(0, 4).join(", ") + ", … " + names[names.length - 1] + " (" + names.length + " heads) overlaid";
    return layer + "heads " + names.slice(0, -1).join(", ") + " and " + names[names.length - 1] + " overlaid";
  }

  // ---- controls: menus, and the arrow keys ----
  const selects = {};
  function menu(name, label, options, value, change) {
    const wrap = el("label", null, "control");
    wrap.append(el("span", label));
    const select = el("select");
    select.id = "choose-" + name;
    for (const [v, text] of options) { const o = el("option", text); o.value = String(v); select.append(o); }
    select.value = String(value);
    select.addEventListener("change", () => change(select.value));
    wrap.append(select);
    $("controls").append(wrap);
    selects[name] = select;
    return select;
  }
  function buildControls() {
    $("controls").replaceChildren();
    if (data.parts.length > 1)
      menu("part", "Attention", data.parts.map((p, k) => [k, p.name]), state.part, (v) => { state.part = +v; state.layer = Math.min(state.layer, part().layers.length - 1); state.head = Math.min(state.head, layerOf().maps.length - 1); state.active = null; buildControls(); if (data.view === "model") buildTiles(); show(true); });
    const p = part();
    menu("layer", "Layer", p.layers.map((l, k) => [k, "layer " + l.layer]), state.layer, (v) => choose(+v, state.head));
    if (p.layers.length < 2) selects.layer.parentElement.hidden = true;
    menu("head", "Head", layerOf().maps.map((mp, k) => [k, shortLabel(mp.label)]), state.head, (v) => choose(state.layer, +v));
    if (data.view === "lines") buildSwatches();
    if (data.view !== "lines") menu("scale", "Colour", [["auto", "auto (" + p.scale + ")"], ["linear", "linear"], ["log", "log"], ["power", "square root"]], state.scale, (v) => { state.scale = v; show(true); });
    const fixed = p.layers.some((l) => l.maps.some((mp) => mp.hidden.length));
    const sinkOptions = fixed ? [["hide", "hidden (before pooling)"]] : pooled(p) ? [["show", "shown"], ["mark", "marked"]] : [["show", "shown"], ["mark", "marked"], ["hide", "hidden"]];
    if (fixed) state.sinks = "hide";
    else if (pooled(p) && state.sinks === "hide") state.sinks = "show";
    const sinks = menu("sinks", "Sinks", sinkOptions, state.sinks, (v) => { state.sinks = v; show(true); });
    sinks.disabled = fixed;
    if (p.sentence_b_start !== null && p.sentence_b_start !== undefined)
      menu("sentences", "Sentences", [["all", "all"], ["aa", "A → A"], ["bb", "B → B"], ["ab", "A → B"], ["ba", "B → A"]], state.sentences, (v) => { state.sentences = v; state.active = null; show(true); });
  }
  function buildSwatches() {  // bertviz's head view: a swatch per head in its colour; a click draws or hides the head,
    // a double click draws it alone (← → choose one head; the Head menu, hidden, follows)
    state.heads = state.heads.filter((h) => h < layerOf().maps.length);
    selects.head.parentElement.hidden = true;
    const group = el("div", null, "control head-swatches");
    group.id = "head-swatches";
    group.setAttribute("role", "group");
    group.setAttribute("aria-label", "heads drawn");
    group.append(el("span", "Heads"));
    layerOf().maps.forEach((mp, h) => {
      const name = shortLabel(mp.label), button = el("button", name.replace(/^head /, ""), "head-swatch");
      button.type = "button";
      button.dataset.head = String(h);
      button.style.setProperty("--swatch", headColour(h));
      button.setAttribute("aria-label", name);
      button.title = name + ": click to draw or hide it, double-click to draw it alone";
      button.addEventListener("click", () => chooseHeads(state.heads.includes(h) ? state.heads.filter((k) => k !== h) : [...state.heads, h].sort((a, b) => a - b)));
      button.addEventListener("dblclick", () => chooseHeads([h]));
      group.append(button);
    });
    $("controls").append(group);
  }
  function chooseHeads(heads) {
    state.heads = heads;
    if (heads.length && !heads.includes(state.head)) state.head = heads[0];
    selects.head.value = String(state.head);
    show(false);
  }
  function shortLabel(label) { return label.includes(" · ") ? label.split(" · ").slice(1).join(" · ") : label; }
  function choose(layer, head) {
    const p = part(), before = state.head;
    state.layer = Math.max(0, Math.min(p.layers.length - 1, layer));
    state.head = Math.max(0, Math.min(layerOf().maps.length - 1, head));
    if (state.head !== before || !state.heads.length) state.heads = [state.head];  // a layer of its own keeps the heads
    if (selects.layer.value !== String(state.layer)) selects.layer.value = String(state.layer);
    const heads = layerOf().maps.map((mp, k) => [k, shortLabel(mp.label)]);
    if (selects.head.options.length !== heads.length) {
      selects.head.replaceChildren(...heads.map(([v, t]) => { const o = el("option", t); o.value = String(v); return o; }));
    }
    selects.head.value = String(state.head);
    show(false);
  }
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (target instanceof HTMLSelectElement || event.altKey || event.ctrlKey || event.metaKey) return;
    if (target && target.dataset && target.dataset.cell && event.key.startsWith("Arrow")) {  // a grid's cells
      const down = { ArrowUp: -1, ArrowDown: 1 }[event.key] || 0, across = { ArrowLeft: -1, ArrowRight: 1 }[event.key] || 0;
      const next = document.querySelector('.cell[data-layer="' + (+target.dataset.layer + down) + '"][data-head="' + (+target.dataset.head + across) + '"]');
      if (next) next.focus();
      event.preventDefault();
      return;
    }
    if (!data.parts.length) return;
    const token = target && target.dataset ? target.dataset.side : undefined;
    if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
      choose(state.layer, state.head + (event.key === "ArrowRight" ? 1 : -1));
    } else if (event.key === "ArrowUp" || event.key === "ArrowDown") {
      const step = event.key === "ArrowDown" ? 1 : -1;
      if (token) {
        const next = document.querySelector('[data-side="' + token + '"][data-index="' + (+target.dataset.index + step) + '"]');
        if (next) next.focus();
      } else choose(state.layer + step, state.head);
    } else if (event.key === "Escape") {
      state.active = null;
      if (token) target.blur();
      drawActive();
    } else return;
    event.preventDefault();
  });

  // ---- the heatmap: a canvas of the chosen map, labels as text beside it ----
  const panelBox = $("heatmap-box");
  const heat = { cell: 1, x: 0, y: 0, width: 0, height: 0 };
  function drawHeatmap() {
    const { p, layer, head } = shown(), { rows, cols } = ranges();
    const n = rows[1] - rows[0], m = cols[1] - cols[0], M = keys(p).length;
    const w = weights(p, layer, head), allowed = mask(p, layer), entry = p.layers[layer].maps[head];
    const scale = scaleOf(p, entry), floor = p.floor, hidden = hiddenColumns(p, entry);
    const side = Math.min(style.panel, Math.max(160, window.innerWidth - 24 * style.font));
    const cell = Math.min(side / Math.max(n, m), style.font * 3.6);
    const font = Math.max(style.font * 0.75, Math.min(style.font * 0.85, cell / 1.15));
    const rowStep = tickStep(n, cell * n, font), colStep = tickStep(m, cell * m, font);
    const room = Math.min(widest(p, rows, cols, rowStep, colStep, font) + font * 0.5, side * 0.45, font * 0.62 * 16);
    const top = room + style.font * 2, left = room + style.font * 2.4;
    Object.assign(heat, { cell, x: left, y: top, width: cell * m, height: cell * n, rows, cols, font });
    panelBox.style.width = left + cell * m + "px";
    panelBox.style.height = top + cell * n + "px";
    const ratio = window.devicePixelRatio || 1;
    for (const canvas of [$("heatmap"), $("heatmap-over")]) {
      canvas.style.left = left + "px"; canvas.style.top = top + "px";
      canvas.style.width = cell * m + "px"; canvas.style.height = cell * n + "px";
      canvas.width = Math.max(1, Math.round(cell * m * ratio)); canvas.height = Math.max(1, Math.round(cell * n * ratio));
    }
    const ctx = $("heatmap").getContext("2d");
    const image = new ImageData(m, n);
    let masked = false;
    for (let i = 0; i < n; i++) for (let j = 0; j < m; j++) {
      const k = (rows[0] + i) * M + cols[0] + j, o = (i * m + j) * 4;
      if ((allowed && !allowed[k]) || hidden.includes(cols[0] + j)) { masked = true; continue; }
      const rgb = colour(position(w[k], scale, floor));
      image.data[o] = rgb[0]; image.data[o + 1] = rgb[1]; image.data[o + 2] = rgb[2]; image.data[o + 3] = 255;
    }
    const small = document.createElement("canvas");
    small.width = m; small.height = n;
    small.getContext("2d").putImageData(image, 0, 0);
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, ctx.canvas.width, ctx.canvas.height);
    if (masked) hatch(ctx);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(small, 0, 0, ctx.canvas.width, ctx.canvas.height);
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    if (cell >= style.font * 2.2 && !pooled(p)) writeValues(ctx, w, allowed, M, rows, cols, cell, scale, floor, hidden);
    if (state.sinks === "mark") markSinks(ctx, p.layers[layer].maps[head], cell, n, cols);
    labelAxes(p, rows, cols, cell, font, rowStep, colStep, room, top, left);
    labelNote = rowStep > 1 || colStep > 1 ? (pooled(p) ? "bins" : "tokens") + " labelled every " + ordinal(Math.max(rowStep, colStep)) : "";
    drawLegend(scale, floor, cell * n);
    $("heatmap").dataset.map = [p.id, layer, head, scale, state.sinks].join("/");
  }
  const measure = document.createElement("canvas").getContext("2d");
  function widest(p, rows, cols, rowStep, colStep, font) {  // the longest label shown, in pixels
    measure.font = font + "px " + getComputedStyle(document.body).fontFamily;
    let most = 0;
    for (let i = rows[0]; i < rows[1]; i += rowStep) most = Math.max(most, measure.measureText(named(p, "query", i, 16)).width);
    for (let j = cols[0]; j < cols[1]; j += colStep) most = Math.max(most, measure.measureText(named(p, "key", j, 16)).width);
    return most;
  }
  function hatch(ctx) {
    const tile = document.createElement("canvas");
    tile.width = tile.height = 8;
    const t = tile.getContext("2d");
    t.fillStyle = style.colours.masked; t.fillRect(0, 0, 8, 8);
    t.strokeStyle = style.colours.hatch; t.lineWidth = 1.5;
    t.beginPath(); t.moveTo(0, 8); t.lineTo(8, 0); t.moveTo(-2, 2); t.lineTo(2, -2); t.moveTo(6, 10); t.lineTo(10, 6); t.stroke();
    ctx.fillStyle = ctx.createPattern(tile, "repeat");
    ctx.fillRect(0, 0, ctx.canvas.width, ctx.canvas.height);
  }
  function writeValues(ctx, w, allowed, M, rows, cols, cell, scale, floor, hidden) {
    const size = Math.min(style.font * 0.8, cell * 0.8 / 2.6);
    if (size < style.font * 0.6) return;
    ctx.font = size + "px " + getComputedStyle(document.body).fontFamily;
    ctx.textAlign = "center"; ctx.textBaseline = "middle";
    for (let i = rows[0]; i < rows[1]; i++) for (let j = cols[0]; j < cols[1]; j++) {
      const k = i * M + j;
      if ((allowed && !allowed[k]) || hidden.includes(j)) continue;
      ctx.fillStyle = luminance(colour(position(w[k], scale, floor))) > 0.179 ? "#000" : "#fff";
      ctx.fillText(w[k].toFixed(2), (j - cols[0] + 0.5) * cell, (i - rows[0] + 0.5) * cell);
    }
  }
  function markSinks(ctx, entry, cell, n, cols) {
    ctx.save();
    ctx.setLineDash([5, 3]); ctx.lineWidth = 1.5; ctx.strokeStyle = style.colours.text;
    for (const sink of entry.sinks) {
      const c = sink.column - cols[0];
      if (c < 0 || c >= cols[1] - cols[0]) continue;
      ctx.strokeRect(c * cell + 0.75, 0.75, Math.max(cell - 1.5, 1), n * cell - 1.5);
    }
    ctx.restore();
  }
  function labelAxes(p, rows, cols, cell, font, rowStep, colStep, room, top, left) {
    const keyBox = $("key-labels"), queryBox = $("query-labels");
    keyBox.replaceChildren(); queryBox.replaceChildren();
    const chars = Math.max(4, Math.floor(room / (font * 0.62)));
    const fitted = (side, index) => {  // whole when it fits the room measured for the labels (widest), else cut
      const whole = named(p, side, index, 16);
      return measure.measureText(whole).width <= room ? whole : named(p, side, index, chars);
    };
    const qPad = p.padding || [], kPad = p.key_padding || p.padding || [];
    for (let j = cols[0]; j < cols[1]; j += colStep) {
      const label = el("div", fitted("key", j), "key-label" + (kPad[j] ? " padding" : ""));
      label.style.left = left + (j - cols[0] + 0.5) * cell + "px";
      label.style.top = top - 4 + "px";
      label.style.fontSize = font + "px";
      label.style.width = room + "px";
      keyBox.append(label);
    }
    for (let i = rows[0]; i < rows[1]; i += rowStep) {
      const label = el("div", fitted("query", i), "query-label" + (qPad[i] ? " padding" : ""));
      label.style.top = top + (i - rows[0] + 0.5) * cell + "px";
      label.style.left = left - 4 - room + "px";
      label.style.width = room + "px";
      label.style.fontSize = font + "px";
      queryBox.append(label);
    }
    const unit = pooled(p) ? " bin" : "";
    $("axis-keys").textContent = colStep > 1 ? "keys · every " + ordinal(colStep) + unit : "keys";
    $("axis-keys").style.left = left + "px"; $("axis-keys").style.width = cell * (cols[1] - cols[0]) + "px";
    $("axis-queries").textContent = rowStep > 1 ? "queries · every " + ordinal(rowStep) + unit : "queries";
    $("axis-queries").style.top = top + cell * (rows[1] - rows[0]) / 2 + "px";
  }
  function drawLegend(scale, floor, height) {
    const bar = $("colour-bar"), ratio = window.devicePixelRatio || 1;
    const width = Math.round(style.font * 1.1);
    bar.style.width = width + "px"; bar.style.height = height + "px";
    $("legend").style.marginTop = heat.y + "px";
    bar.width = Math.round(width * ratio); bar.height = Math.max(1, Math.round(height * ratio));
    const ctx = bar.getContext("2d");
    for (let y = 0; y < bar.height; y++) {
      const rgb = colour(1 - y / Math.max(1, bar.height - 1));
      ctx.fillStyle = "rgb(" + rgb.join(",") + ")";
      ctx.fillRect(0, y, bar.width, 1);
    }
    const box = $("ticks");
    box.replaceChildren();
    box.style.height = height + "px";
    let last = Infinity;
    for (const [pos, text] of ticks(scale, floor).reverse()) {
      const y = (1 - pos) * height;
      if (Math.abs(last - y) < style.font * 1.2 && pos !== 0) continue;
      last = y;
      const tick = el("div", text, "tick");
      tick.style.top = y + "px";
      box.append(tick);
    }
    $("legend-title").textContent = "attention weight" + SCALE_NAMES[scale];
    $("legend-title").style.height = height + "px";
  }

  // the heatmap's hover: query, key and weight of the cell under the pointer
  const over = $("heatmap-over");
  function cellAt(event) {
    const box = over.getBoundingClientRect();
    const j = Math.floor((event.clientX - box.left) / heat.cell), i = Math.floor((event.clientY - box.top) / heat.cell);
    if (i < 0 || j < 0 || i >= heat.rows[1] - heat.rows[0] || j >= heat.cols[1] - heat.cols[0]) return null;
    return { query: heat.rows[0] + i, key: heat.cols[0] + j };
  }
  over.addEventListener("mousemove", (event) => {
    const at = cellAt(event);
    state.hover = at;
    if (!at) return hideTip();
    const text = describeCell(at.query, at.key);
    tip(text, event.clientX, event.clientY);
    clearOf($("legend"), event.clientX);
    $("readout").textContent = text;
    drawCursor();  // the lines stay as they are: a cell is not a token
  });
  over.addEventListener("mouseleave", () => { state.hover = null; hideTip(); drawCursor(); });
  function tokenText(p, side, index) {
    const label = named(p, side, index);
    if (!pooled(p) || !p.tokens) return label;
    const [a, b] = label.split("–").map(Number);
    const inside = p.tokens.slice(a, (Number.isNaN(b) ? a : b) + 1);
    return "tokens " + label + ": " + cut(inside.join(""), 40);
  }
  function cellSide(p, side, index) {  // "query 5 “mat”"; a pooled map's bin by the positions it holds: "queries 1553–1563 “…”"
    if (!pooled(p)) return side + " " + index + " “" + tokenText(p, side, index) + "”";
    const label = side === "query" ? queries(p)[index] : keys(p)[index], [a, b = a] = label.split("–").map(Number);
    const named = b === a ? side : side === "query" ? "queries" : "keys";
    const inside = p.tokens ? " “" + cut(p.tokens.slice(a, b + 1).join(""), 40) + "”" : "";
    return named + " " + label + inside;
  }
  function describeCell(query, key) {
    const { p, layer, head } = shown(), M = keys(p).length, allowed = mask(p, layer);
    const what = pooled(p) ? (p.pooled.method === "max" ? "max weight" : "mean weight") : "weight";
    const said = cellSide(p, "query", query) + " → " + cellSide(p, "key", key) + ": ";
    if (allowed && !allowed[query * M + key]) return said + "masked (this query may not see this key)";
    if (hiddenColumns(p, p.layers[layer].maps[head]).includes(key)) return said + "hidden (an attention sink): the row renormalised without it";
    return said + what + " " + number(weights(p, layer, head)[query * M + key]);
  }
  function tip(text, x, y) {
    const t = $("tooltip");
    t.textContent = text;
    t.hidden = false;
    const width = t.offsetWidth;
    t.style.left = Math.max(4, Math.min(window.innerWidth - width - 8, x + 14)) + window.scrollX + "px";
    t.style.top = y + 18 + window.scrollY + "px";
  }
  function clearOf(element, x) {  // the tooltip moved to the pointer's left where it would cover ``element``
    const t = $("tooltip"), box = t.getBoundingClientRect(), keep = element.getBoundingClientRect();
    if (box.right <= keep.left || box.left >= keep.right || box.bottom <= keep.top || box.top >= keep.bottom) return;
    t.style.left = Math.max(4, x - 14 - box.width) + window.scrollX + "px";
  }
  function hideTip() { $("tooltip").hidden = true; }

  // ---- the lines: tokens left (queries) and right (keys), a line per weight, opacity and width by weight
  // (as render/lines.py draws them: 0.15 + 0.85 × weight) ----
  const lines = { rows: [], cols: [] };
  const headColour = (h) => style.head_colours[h % style.head_colours.length];
  function drawn() {  // the maps the lines draw: the head view's chosen heads overlaid, each in its colour; else the map shown
    if (data.view !== "lines" || (state.heads.length === 1 && state.heads[0] === state.head)) {
      const s = shown();
      return { p: s.p, maps: [{ layer: s.layer, head: s.head, colour: headColour(state.head) }] };
    }
    return { p: part(), maps: state.heads.map((h) => ({ layer: state.layer, head: h, colour: headColour(h) })) };
  }
  function drawLines() {
    const { p, maps } = drawn(), { rows, cols } = ranges();
    const box = $("lines");
    box.replaceChildren();
    const font = style.font, row = Math.round(font * 1.5);
    const n = rows[1] - rows[0], m = cols[1] - cols[0];
    const chars = 16, numberW = font * 3.6;
    const labelW = Math.min(widest(p, rows, cols, 1, 1, font * 0.95) + font * 0.6, 12 * font);
    const gap = Math.max(font * 8, data.view === "lines" ? style.panel * 0.5 : style.panel * 0.35);
    const xq = numberW + labelW, xk = xq + gap;
    const width = xk + labelW + numberW, height = Math.max(n, m) * row + font * 2.4;
    box.setAttribute("width", width); box.setAttribute("height", height);
    box.setAttribute("viewBox", "0 0 " + width + " " + height);
    const title = svg("text", { x: xq - 6, y: font * 1.1, "text-anchor": "end", class: "side-title" });
    title.textContent = "queries";
    const title2 = svg("text", { x: xk + 6, y: font * 1.1, "text-anchor": "start", class: "side-title" });
    title2.textContent = "keys";
    box.append(title, title2);
    const top = font * 2.2;
    const group = svg("g", { id: "links" });
    box.append(group);
    lines.rows = []; lines.cols = [];
    const qPad = p.padding || [], kPad = p.key_padding || p.padding || [];
    const place = (side, index, slot, x, anchor, padded) => {
      const y = top + slot * row + row / 2;
      const text = svg("text", { x, y, "text-anchor": anchor, "dominant-baseline": "central", tabindex: 0, class: "token " + side + (padded ? " padding" : ""), "data-side": side, "data-index": index, role: "button" });
      text.textContent = named(p, side, index, chars);
      text.setAttribute("aria-label", side + " " + index + ": " + named(p, side, index));
      const number = svg("text", { x: side === "query" ? x - labelW - 4 : x + labelW + 4, y, "text-anchor": anchor, "dominant-baseline": "central", class: "number" });
      const activate = () => { state.active = { side, index }; drawActive(); };
      text.addEventListener("mouseenter", activate);
      text.addEventListener("focus", activate);
      text.addEventListener("mouseleave", () => { if (document.activeElement !== text) { state.active = null; drawActive(); } });
      text.addEventListener("blur", () => { state.active = null; drawActive(); });
      box.append(text, number);
      return { text, number, y };
    };
    for (let i = rows[0]; i < rows[1]; i++) lines.rows.push(place("query", i, i - rows[0], xq - 6, "end", qPad[i]));
    for (let j = cols[0]; j < cols[1]; j++) lines.cols.push(place("key", j, j - cols[0], xk + 6, "start", kPad[j]));
    Object.assign(lines, { group, xq, xk, rows0: rows[0], cols0: cols[0] });
    if (state.sinks === "mark") {  // outlined as the figures outline a sink's key label (each head's, overlaid)
      const columns = new Set(maps.flatMap((map) => p.layers[map.layer].maps[map.head].sinks.map((sink) => sink.column)));
      for (const column of columns) {
        const at = lines.cols[column - cols[0]];
        if (!at) continue;
        const b = at.text.getBBox();
        box.append(svg("rect", { x: b.x - 3, y: b.y - 2, width: b.width + 6, height: b.height + 4, fill: "none",
          stroke: style.colours.text, "stroke-dasharray": "4 3", class: "sink" }));
      }
    }
    drawActive();
  }
  function drawActive() {
    drawLinks();
    drawCursor();
  }
  function drawLinks() {
    if ($("lines-panel").hidden || !lines.group) return;
    const { p, maps } = drawn(), M = keys(p).length, { rows, cols } = ranges();
    const links = [], said = [];
    const active = state.active;
    for (const r of lines.rows) r.number.textContent = "";
    for (const c of lines.cols) c.number.textContent = "";
    for (const t of [...lines.rows, ...lines.cols]) t.text.classList.remove("active");
    if (active) {
      const mine = active.side === "query" ? lines.rows[active.index - rows[0]] : lines.cols[active.index - cols[0]];
      if (mine) mine.text.classList.add("active");
    }
    for (const map of maps) {
      const w = weights(p, map.layer, map.head), allowed = mask(p, map.layer);
      const hidden = hiddenColumns(p, p.layers[map.layer].maps[map.head]), its = [];
      if (active) {
        const other = active.side === "query" ? lines.cols : lines.rows;
        for (let k = 0; k < other.length; k++) {
          const i = active.side === "query" ? active.index : rows[0] + k, j = active.side === "query" ? cols[0] + k : active.index;
          if (allowed && !allowed[i * M + j]) continue;
          const weight = w[i * M + j];
          if (maps.length === 1) other[k].number.textContent = hidden.includes(j) ? "hidden" : number(weight);
          if (weight > 0.002 && !hidden.includes(j)) its.push([i, j, weight, map]);  // a hidden sink: no line, as the figure
        }
        said.push(readout(p, active, its, maps.length > 1 ? map : null));
      } else {
        for (let i = rows[0]; i < rows[1]; i++) for (let j = cols[0]; j < cols[1]; j++) {
          const weight = w[i * M + j];
          if (weight >= data.min_weight && (!allowed || allowed[i * M + j]) && !hidden.includes(j)) its.push([i, j, weight, map]);
        }
      }
      for (const link of its) links.push(link);
    }
    if (active) {
      const head = active.side + " " + active.index + " “" + cut(tokenText(p, active.side, active.index), 60) + "”:";
      $("readout").textContent = maps.length ? head + (maps.length > 1 ? "\n" : " ") + said.join("\n") : head + " no head chosen";
    } else {
      links.sort((a, b) => b[2] - a[2]);
      links.length = Math.min(links.length, 1500);
    }
    const fragment = document.createDocumentFragment();
    links.sort((a, b) => a[2] - b[2]);  // the strongest drawn last, over the others (of every head)
    for (const [i, j, weight, map] of links) {
      fragment.append(svg("line", { x1: lines.xq, y1: lines.rows[i - rows[0]].y, x2: lines.xk, y2: lines.cols[j - cols[0]].y, stroke: map.colour, "stroke-opacity": (0.15 + 0.85 * Math.min(1, weight)).toFixed(3), "stroke-width": (0.7 + 4 * weight).toFixed(2), "data-head": map.head }));
    }
    lines.group.replaceChildren(fragment);
    $("lines").dataset.links = String(links.length);
  }
  function readout(p, active, links, map) {  // the strongest keys of the active token (of ``map``, named, when several are drawn)
    const top = [...links].sort((a, b) => b[2] - a[2]).slice(0, 5);
    const listed = top.map(([i, j, weight]) => "“" + (active.side === "query" ? named(p, "key", j, 20) : named(p, "query", i, 20)) + "” " + number(weight));
    const who = map ? shortLabel(p.layers[map.layer].maps[map.head].label) + " " : "";
    return who + (active.side === "query" ? "attends most to " : "most attended by ") + (listed.join(", ") || "nothing");
  }
  function drawCursor() {
    if ($("heatmap-panel").hidden || !heat.rows) return;
    const ctx = over.getContext("2d"), ratio = window.devicePixelRatio || 1;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, over.width, over.height);
    ctx.strokeStyle = style.colours.text; ctx.lineWidth = 2;
    const cell = heat.cell, active = state.active;
    if (active && active.side === "query") ctx.strokeRect(1, (active.index - heat.rows[0]) * cell + 1, heat.width - 2, Math.max(cell - 2, 2));
    if (active && active.side === "key") ctx.strokeRect((active.index - heat.cols[0]) * cell + 1, 1, Math.max(cell - 2, 2), heat.height - 2);
    if (state.hover) {
      ctx.strokeStyle = style.colours.background; ctx.lineWidth = 1.5;
      ctx.strokeRect((state.hover.key - heat.cols[0]) * cell, (state.hover.query - heat.rows[0]) * cell, Math.max(cell, 2), Math.max(cell, 2));
    }
  }

  // ---- the model view's tiles: every layer and head, each drawn at its own size (a few thousand pixels, not a
  // map's), all of them in the task after the chosen map's, on screen or not (a frame off screen, a printed or
  // exported notebook show every tile) ----
  let tilesDue = 0;
  function buildTiles() {
    const box = $("tiles"), p = part();
    box.replaceChildren();
    const heads = Math.max(...p.layers.map((l) => l.maps.length));
    const room = Math.max(heads * 30, window.innerWidth * 0.42 - 6 * style.font);
    const size = Math.max(24, Math.min(style.font * 4, Math.floor(room / heads) - 6));
    const grid = el("div", null, "tile-grid");
    grid.style.gridTemplateColumns = "auto repeat(" + heads + ", " + size + "px)";
    grid.append(el("div", "head", "tile-layer"));
    for (let h = 0; h < heads; h++) grid.append(el("div", shortLabel(p.layers[0].maps[h] ? p.layers[0].maps[h].label : "head " + h).replace(/^head /, ""), "tile-head"));
    p.layers.forEach((layer, l) => {
      grid.append(el("div", "layer " + layer.layer, "tile-layer"));
      layer.maps.forEach((entry, h) => {
        const tile = el("canvas", null, "tile");
        tile.width = tile.height = size;
        tile.tabIndex = 0;
        tile.setAttribute("role", "button");
        tile.setAttribute("aria-label", entry.label);
        tile.title = entry.label;
        tile.dataset.layer = String(l); tile.dataset.head = String(h);
        const pick = () => choose(l, h);
        tile.addEventListener("click", pick);
        tile.addEventListener("keydown", (event) => { if (event.key === "Enter" || event.key === " ") { pick(); event.preventDefault(); } });
        grid.append(tile);
      });
    });
    box.append(grid);
  }
  function drawTiles() {
    clearTimeout(tilesDue);
    document.body.dataset.tiles = "drawing";
    tilesDue = setTimeout(drawEveryTile, 0);
  }
  function drawEveryTile() {
    clearTimeout(tilesDue);
    for (const tile of document.querySelectorAll("canvas.tile")) drawTile(tile);
    document.body.dataset.tiles = "drawn";
  }
  window.addEventListener("beforeprint", () => { if (document.body.dataset.tiles === "drawing") drawEveryTile(); });
  function drawTile(tile) {  // each pixel the largest weight of the cells under it that its query may see
    const p = part(), l = +tile.dataset.layer, h = +tile.dataset.head, entry = p.layers[l].maps[h];
    const n = queries(p).length, m = keys(p).length, allowed = mask(p, l), scale = scaleOf(p, entry);
    const codes = p.encoding === "u8" && !(hiddenKeys(p, entry).length && !entry.hidden.length);  // as they order
    const w = codes ? bytesOf(entry.weight) : weights(p, l, h), weightOf = codes ? (v) => lut[v] : (v) => v;
    const rows = Math.min(n, tile.height), cols = Math.min(m, tile.width);
    const hidden = new Set(hiddenColumns(p, entry)), column = new Int32Array(m);
    for (let j = 0; j < m; j++) column[j] = Math.floor((j * cols) / m);
    const most = new Float64Array(rows * cols).fill(-1);  // -1: every cell under the pixel masked
    for (let i = 0; i < n; i++) {
      const row = Math.floor((i * rows) / n) * cols;
      for (let j = 0, k = i * m; j < m; j++, k++) {
        if ((allowed && !allowed[k]) || hidden.has(j)) continue;
        const at = row + column[j];
        if (w[k] > most[at]) most[at] = w[k];
      }
    }
    const image = new ImageData(cols, rows);
    for (let at = 0; at < rows * cols; at++) {
      if (most[at] < 0) continue;
      const rgb = colour(position(weightOf(most[at]), scale, p.floor)), o = at * 4;
      image.data[o] = rgb[0]; image.data[o + 1] = rgb[1]; image.data[o + 2] = rgb[2]; image.data[o + 3] = 255;
    }
    const small = document.createElement("canvas");
    small.width = cols; small.height = rows;
    small.getContext("2d").putImageData(image, 0, 0);
    const ctx = tile.getContext("2d");
    ctx.fillStyle = style.colours.masked;
    ctx.fillRect(0, 0, tile.width, tile.height);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(small, 0, 0, tile.width, tile.height);
  }
  function markTile() {
    for (const tile of document.querySelectorAll(".tile"))
      tile.classList.toggle("chosen", +tile.dataset.layer === state.layer && +tile.dataset.head === state.head);
  }

  // ---- a grid of the heads' scores (heads: the portrait; ablate: each head's Δ), coloured as the figure is ----
  function buildGrid() {
    const g = data.grid, box = $("tiles");
    box.replaceChildren(el("h2", g.title, "grid-title"));
    for (const note of g.notes) box.append(el("p", note, "muted"));
    const wide = Math.max(...g.cells.flat().map((c) => c.text.length)) > 3;  // "+0.13" needs more than ".87"
    const size = Math.round(style.font * (wide ? 3.4 : 2.6)), height = Math.round(style.font * 1.9);
    const grid = el("div", null, "tile-grid");
    grid.style.gridTemplateColumns = "auto repeat(" + g.cols.length + ", " + size + "px)";
    grid.append(el("div", g.corner || "head", "tile-layer"));  // what the columns are: heads, or positions
    for (const name of g.cols) grid.append(el("div", name.replace(/^head /, ""), "tile-head"));
    g.cells.forEach((row, l) => {
      grid.append(el("div", g.rows[l], "tile-layer"));
      row.forEach((cell, h) => {
        const tile = el("div", cell.text, "tile cell");
        tile.style.background = cell.colour;
        tile.style.color = luminance(rgbOf(cell.colour)) > 0.179 ? "#000" : "#fff";
        tile.style.height = height + "px";
        tile.tabIndex = 0;
        tile.setAttribute("role", g.opens ? "button" : "img");
        tile.setAttribute("aria-label", g.rows[l] + " " + g.cols[h] + ": " + cell.about.join("; "));
        Object.assign(tile.dataset, { layer: String(l), head: String(h), cell: "yes" });
        const about = (hovered) => {  // every score below the grid; the first two beside a hovered head
          const name = g.rows[l] + " · " + g.cols[h];
          $("readout").textContent = name + "\n" + cell.about.join("\n");
          const b = tile.getBoundingClientRect();
          if (hovered) tip(name + "\n" + cell.about.slice(0, 2).join("\n"), b.right, b.bottom - 12);
          document.body.dataset.about = l + "/" + h;
        };
        tile.addEventListener("mouseenter", () => about(true));
        tile.addEventListener("focus", () => about(false));
        tile.addEventListener("mouseleave", hideTip);
        tile.addEventListener("blur", hideTip);
        if (g.opens) {
          tile.addEventListener("click", () => choose(l, h));
          tile.addEventListener("keydown", (event) => { if (event.key === "Enter" || event.key === " ") { choose(l, h); event.preventDefault(); } });
        }
        grid.append(tile);
      });
    });
    const row = el("div", null, "grid-row" + (g.legend ? " below" : ""));  // a scale beside, a list of classes below
    row.append(grid);
    box.append(row);
    const legend = el("div", null, "grid-legend");
    for (const entry of g.legend || []) {
      const item = el("span", null, "swatch-entry");
      const swatch = el("span", null, "swatch");
      swatch.style.background = entry.colour;
      item.append(swatch, el("span", entry.label));
      legend.append(item);
    }
    if (g.scale) {
      const bar = el("div", null, "scale-bar");
      for (const stop of g.scale) {
        const item = el("span", null, "scale-stop");
        const swatch = el("span", null, "swatch");
        swatch.style.background = stop.colour;
        item.append(swatch, el("span", stop.label));
        bar.append(item);
      }
      legend.append(el("div", g.scale_title, "scale-title"), bar);
    }
    row.append(legend);
    if (!g.legend) legend.append($("readout"));  // beside the scale, in view however long the grid
  }

  // ---- drawing what the state says ----
  function show(everything) {
    hideTip();
    if (!$("heatmap-panel").hidden) drawHeatmap();
    if (!$("lines-panel").hidden) drawLines();
    drawHeading();
    if (data.view === "model" && everything) drawTiles();
    if (data.view === "model" || data.view === "heads") markTile();
    document.body.dataset.shown = [state.part, state.layer, state.head].join("/");
    if (data.view === "lines") {
      for (const button of document.querySelectorAll(".head-swatch")) button.setAttribute("aria-pressed", String(state.heads.includes(+button.dataset.head)));
      document.body.dataset.heads = state.heads.join(",");
    }
  }
  const panels = { heatmap: ["heatmap-panel", "lines-panel"], lines: ["lines-panel"], model: ["tiles", "heatmap-panel", "lines-panel"], heads: ["tiles", "heatmap-panel"], ablate: ["tiles"] }[data.view];
  for (const id of panels) $(id).hidden = false;
  if (data.view === "model" || data.view === "heads") $("heatmap-panel").prepend($("map-title"));  // beside the tiles, over its map
  const layered = data.parts.some((p) => p.layers.length > 1);
  const help = {
    heads: "Keys: Tab to a head, then the arrows move between heads and Enter opens its map · ← → ↑ ↓ elsewhere: head and layer",
    ablate: "Keys: Tab to a head, then the arrows move between heads; hover or focus a head for its Δ",
  }[data.view];
  const gridHelp = data.grid && data.grid.keys;  // a grid of other cells (the lens's, the attribution's) says its own
  $("keys-help").textContent = gridHelp || help || "Keys: ← → head" + (layered ? " · ↑ ↓ layer" : "") + " · Tab to a token, then ↑ ↓ along the tokens · Esc lets go" + (data.view === "model" ? " · Enter on a tile opens it" : "") + (data.view === "lines" ? " · a head's colour: click (or Enter) draws or hides it, double-click draws it alone" : "");
  $("made-text").textContent = JSON.stringify(data.made, null, 2);
  if (data.grid) buildGrid();
  if (data.parts.length) {
    buildControls();
    if (data.view === "model") buildTiles();
    show(true);
  } else {
    $("heading").textContent = data.grid.heading.join(" · ");
    document.title = "attnviz · " + data.grid.title;
  }
  let resized = 0, drawnWidth = window.innerWidth;
  const redraw = () => { clearTimeout(resized); resized = setTimeout(() => { drawnWidth = window.innerWidth; if (data.view === "model") buildTiles(); if (data.parts.length) show(true); }, 150); };
  const widened = () => { if (window.innerWidth !== drawnWidth) redraw(); };  // what is drawn follows the width only
  window.addEventListener("resize", widened);
  // a frame's script may run before the frame has its width, and no resize follows: its first layout says so
  new ResizeObserver(widened).observe(document.documentElement);
  document.body.dataset.ready = "yes";
  document.body.dataset.readyAt = String(Math.round(performance.now()));  // since the page was asked for
})();
