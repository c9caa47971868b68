/* gpuledger serve: pick two runs in a list, and the comparison opens (two clicks).
   The list's rows each have an "A" and a "B" radio button inside form#pick (GET /compare?a=&b=); without
   this script the form's button does the same. Served as a file: the Content-Security-Policy allows no
   inline script. */
(function () {
  "use strict";
  var form = document.getElementById("pick");
  if (!form) { return; }
  function picked(name) {
    var el = form.querySelector('input[name="' + name + '"]:checked');
    return el ? el.value : null;
  }
  function mark() {
    var a = picked("a"), b = picked("b");
    form.querySelectorAll("tr[data-run]").forEach(function (tr) {
      tr.classList.toggle("picked-a", tr.getAttribute("data-run") === a);
      tr.classList.toggle("picked-b", tr.getAttribute("data-run") === b);
    });
    return [a, b];
  }
  form.addEventListener("change", function (event) {
    var target = event.target;
    if (!target || target.type !== "radio") { return; }
    var ab = mark();
    // The same run as A and B: keep the one just picked.
    if (ab[0] !== null && ab[0] === ab[1]) {
      var other = target.name === "a" ? "b" : "a";
      var el = form.querySelector('input[name="' + other + '"]:checked');
      if (el) { el.checked = false; }
      ab = mark();
    }
    if (ab[0] !== null && ab[1] !== null) {
      window.location.assign(form.getAttribute("action") + "?" + new URLSearchParams({ a: ab[0], b: ab[1] }));
    }
  });
  mark();
})();
