// The pages' layout check (tests/test_pages_browser.py): what overlaps or is cut, as a list of problems.
const problems = [];
const box = (e) => e.getBoundingClientRect();
const apart = (a, b) =>
  a.right <= b.left + 0.5 || b.right <= a.left + 0.5 || a.bottom <= b.top + 0.5 || b.bottom <= a.top + 0.5;
const shown = (e) => e.getClientRects().length > 0 && box(e).width > 0;
const groups = {
  "key labels": ".key-label", "query labels": ".query-label", "colour bar ticks": ".tick",
  "query tokens": "#lines text.token[data-side=query]", "key tokens": "#lines text.token[data-side=key]",
  "numbers": "#lines text.number", "menus": ".control", "tile heads": ".tile-head",
};
for (const [name, selector] of Object.entries(groups)) {
  const items = Array.from(document.querySelectorAll(selector)).filter(shown);
  for (let k = 1; k < items.length; k++)
    if (!apart(box(items[k - 1]), box(items[k]))) problems.push(name + " overlap: " + items[k - 1].textContent + " / " + items[k].textContent);
}
const canvas = document.getElementById("heatmap");
if (shown(canvas)) {
  for (const selector of [".key-label", ".query-label", "#axis-keys", "#axis-queries", "#legend"])
    for (const e of Array.from(document.querySelectorAll(selector)).filter(shown))
      if (!apart(box(canvas), box(e))) problems.push(selector + " overlaps the heatmap: " + e.textContent);
  for (const [title, labels] of [["#axis-keys", ".key-label"], ["#axis-queries", ".query-label"]])
    for (const e of document.querySelectorAll(labels))
      if (!apart(box(document.querySelector(title)), box(e))) problems.push(title + " overlaps " + e.textContent);
  const ticks = Array.from(document.querySelectorAll(".tick"));
  for (const t of ticks) if (!apart(box(t), box(document.getElementById("legend-title")))) problems.push("tick " + t.textContent + " overlaps the legend's title");
}
for (const id of ["heading", "controls", "keys-help", "map-title"]) {
  const e = document.getElementById(id);
  if (e.scrollWidth > e.clientWidth + 1) problems.push(id + " is cut: " + e.textContent);
}
if (document.documentElement.scrollWidth > window.innerWidth + 1) problems.push("the page is wider than the window");
return problems;
