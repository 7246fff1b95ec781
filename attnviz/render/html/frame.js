// A page in a notebook's frame (<iframe srcdoc>, attnviz/notebook.py) tells the notebook how tall it is, and again
// whenever that changes, so the script beside the frame sizes the frame to the page: no scroll bar inside the frame,
// nothing cut, nothing blank. In a frame the page's height never depends on the frame's (no panel is a share of
// the frame's height), so the two cannot chase each other. Inlined after page.js, before the view's own script.
"use strict";
(function () {
  if (window.parent === window) return;
  document.body.classList.add("framed", "framed-" + attnviz.data.view);
  const main = document.querySelector("main");
  let told = 0;
  function tell() {
    const height = Math.ceil(main.getBoundingClientRect().height);
    if (height === told) return;
    told = height;
    window.parent.postMessage({ attnviz: "height", height }, "*");
  }
  new ResizeObserver(tell).observe(main);
  window.addEventListener("message", (event) => {
    if (event.source === window.parent && event.data && event.data.attnviz === "measure") { told = 0; tell(); }
  });
})();
