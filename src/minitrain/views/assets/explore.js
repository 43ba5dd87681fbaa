/* explore.js: the regime map (views/explore.py): one heat map per lab prediction. No network: nothing here
 * fetches anything. Sets window.__exploreReady = true once every map is drawn. */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("explore-data").textContent);
  var app = document.getElementById("app");

  var el = helpers.el;
  function pct(x) { return x === null || x === undefined ? "-" : Math.round(100 * x) + "%"; }

  var head = el("p", {"class": "sub"});
  head.textContent = "Grid '" + D.grid + "': each cell is an injection at K=" + D.K + " forked from its trunk's baseline and run "
    + D.tail + " steps past K (the lab's " + D.schedule_steps + "-step schedule, stopped at step " + D.stop + "). "
    + "Green: the lab's prediction holds; red: it does not; the number is what was measured. A spike is a loss excess above "
    + D.definitions.spike_nats + " nats; recovered = every " + D.definitions.recovery_window
    + "-step mean of the loss difference within " + D.definitions.recovery_tolerance_nats + " nats. "
    + "Click a cell for the injection run's dashboard.";
  app.appendChild(head);
  var legend = el("p", {"class": "legend"});
  [["holds", "#cfeccf"], ["does not hold", "#f6d2cf"], ["not on the grid", "#eceef1"]].forEach(function (l) {
    var s = el("span", {}, l[0]); s.style.background = l[1]; legend.appendChild(s);
  });
  app.appendChild(legend);

  var maps = el("div", {"class": "maps"});
  app.appendChild(maps);

  D.predictions.forEach(function (P) {
    var box = el("section", {"class": "map", "id": "map-" + P.id, "data-prediction": P.id});
    box.appendChild(el("h2", {}, P.id + " (" + P.letter + ", " + P.injection + "): " + P.text));
    box.appendChild(el("div", {"class": "region"}, "Holds in " + P.holds_in + " of " + P.points.length
      + " cells: " + P.region));
    function vals(a) {  // this prediction's values along axis a, in the axis's order
      return D.axes[a].values.filter(function (v) { return P.points.some(function (p) { return p.coords[a] === v; }); });
    }
    var varied = P.axes.filter(function (a) { return vals(a).length > 1; });
    var state = {x: P.default_axes[0] || null, y: P.default_axes[1] || null, fixed: {}};
    P.axes.forEach(function (a) {  // the other axes start at the lab's own setting where the grid has it
      state.fixed[a] = vals(a).indexOf(P.lab_coords[a]) >= 0 ? P.lab_coords[a] : vals(a)[0];
    });
    var controls = el("div", {"class": "controls"});
    var table = el("table", {"class": "heat"});
    box.appendChild(controls);
    box.appendChild(table);
    maps.appendChild(box);

    function select(name, options, value, onchange) {
      var lab = el("label", {}, name + " ");
      var s = el("select", {"data-axis": name});
      options.forEach(function (o) {
        var opt = el("option", {value: o}, o);
        if (o === value) opt.selected = true;
        s.appendChild(opt);
      });
      s.addEventListener("change", function () { onchange(s.value); draw(); });
      lab.appendChild(s);
      return lab;
    }
    function draw() {
      controls.textContent = "";
      controls.appendChild(select("x", varied, state.x, function (v) { if (v === state.y) state.y = state.x; state.x = v; }));
      if (varied.length > 1)
        controls.appendChild(select("y", varied, state.y, function (v) { if (v === state.x) state.x = state.y; state.y = v; }));
      P.axes.forEach(function (a) {
        if (a === state.x || a === state.y || vals(a).length < 2) return;
        controls.appendChild(select(a, vals(a), state.fixed[a], function (v) { state.fixed[a] = v; }));
      });
      table.textContent = "";
      var xs = state.x ? vals(state.x) : [""];
      var ys = state.y ? vals(state.y) : [""];
      var tr = el("tr");
      tr.appendChild(el("th", {"class": "corner"}, state.y ? state.y + " \\ " + state.x : (state.x || "")));
      xs.forEach(function (x) { tr.appendChild(el("th", {}, x)); });
      table.appendChild(tr);
      ys.forEach(function (y) {
        var row = el("tr");
        row.appendChild(el("th", {}, y));
        xs.forEach(function (x) {
          var p = P.points.find(function (p) {
            return P.axes.every(function (a) {
              if (a === state.x) return p.coords[a] === x;
              if (a === state.y) return p.coords[a] === y;
              return p.coords[a] === state.fixed[a];
            });
          });
          var td = el("td", {"class": p ? (p.holds ? "holds" : "fails") : "na"});
          if (p) {
            td.setAttribute("data-holds", String(p.holds));
            var a = el("a", {href: p.run, title: JSON.stringify(p.coords) + "\n" + p.measured + "\nbaseline: " + p.baseline});
            a.appendChild(el("span", {"class": "v"}, p.holds ? "holds" : "no"));
            a.appendChild(el("span", {}, p.measured));
            td.appendChild(a);
          } else {
            td.textContent = "not run";
          }
          row.appendChild(td);
        });
        table.appendChild(row);
      });
    }
    draw();
  });

  var sec = el("section", {"id": "trunks"});
  sec.appendChild(el("h2", {}, "Trunks: how often clipping engages on the healthy run"));
  sec.appendChild(el("p", {"class": "hint"}, "Clip thresholds are placed on the unclipped healthy run's pre-clip norm over steps [warmup, K + " + D.tail + "). "
    + "Clipped = share of the baseline's steps whose pre-clip norm exceeded the threshold."));
  var t = el("table", {"class": "trunks"});
  var h = el("tr");
  ["trunk", "lr", "batch", "clip", "threshold", "clipped before K", "clipped after K", "baseline"].forEach(function (c) { h.appendChild(el("th", {}, c)); });
  t.appendChild(h);
  D.trunks.forEach(function (T) {
    var r = el("tr");
    [T.label, T.lr, T.batch, T.clip, T.clip_value === null ? "off" : T.clip_value,
     pct(T.clipped_before_k), pct(T.clipped_after_k)].forEach(function (c) { r.appendChild(el("td", {}, c)); });
    var td = el("td"); td.appendChild(el("a", {href: T.baseline}, "dashboard")); r.appendChild(td);
    t.appendChild(r);
  });
  sec.appendChild(t);
  app.appendChild(sec);
  app.appendChild(el("p", {"class": "hint"}, D.cells + " cells in " + D.seconds + " s wall on " + D.jobs + " worker processes ("
    + D.trained + " runs trained in " + D.cpu_seconds + " CPU s, " + D.reused + " reused from the cache). Regenerate: minitrain explore"
    + (D.grid === "quick" ? " --quick" : "") + "."));
  window.__exploreReady = true;
})();
