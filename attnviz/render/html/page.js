// What every attnviz page shares, before its view's own script: the data (the one JSON blob), the theme and the
// preset as CSS variables (the style's rules read them), and the DOM helpers. Every token, name and label goes into
// the page as text (el: textContent), never markup.
"use strict";
const attnviz = (function () {
  const data = JSON.parse(document.getElementById("attnviz-data").textContent);
  const style = data.style;
  const root = document.documentElement.style;
  for (const [name, value] of Object.entries(style.colours)) root.setProperty("--" + name, value);
  root.setProperty("--font", style.font + "px");
  document.body.classList.add("theme-" + style.theme, "preset-" + style.preset);
  const rgbOf = (hex) => [1, 3, 5].map((k) => parseInt(hex.slice(k, k + 2), 16));

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function cut(text, chars) {  // render.labels.abbreviate: whole code points, an ellipsis past ``chars``
    const points = Array.from(text);
    return points.length <= chars ? text : points.slice(0, Math.max(1, chars - 1)).join("").trimEnd() + "…";
  }
  return { data, style, $: (id) => document.getElementById(id), el, cut, rgbOf, cmap: style.cmap.map(rgbOf) };
})();
