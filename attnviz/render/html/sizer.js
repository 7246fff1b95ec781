// Beside a page's frame in a notebook (attnviz/notebook.py, Page._repr_html_): sizes each attnviz frame to the
// height its page says it is (frame.js), and asks the frames already there to say it again. Where the notebook runs
// no script of its outputs, the frame keeps the height attnviz computed for it.
(function () {
  var frames = function () { return document.querySelectorAll("iframe.attnviz-frame"); };
  if (!window.attnvizFrames) {
    window.attnvizFrames = true;
    window.addEventListener("message", function (event) {
      var said = event.data;
      if (!said || said.attnviz !== "height" || typeof said.height !== "number" || !isFinite(said.height)) return;
      Array.prototype.forEach.call(frames(), function (frame) {
        if (frame.contentWindow === event.source) frame.style.height = Math.min(Math.max(said.height, 40), 50000) + "px";
      });
    });
  }
  Array.prototype.forEach.call(frames(), function (frame) {
    if (frame.contentWindow) frame.contentWindow.postMessage({ attnviz: "measure" }, "*");
  });
})();
