/* lrsweep.js: the LR sweep's page (views/lrsweep.py): final loss, largest attention logit and log Z against the
 * peak learning rate, one line per variant (drawn by chart.js, as the dashboard's panels are); the LR-sensitivity
 * numbers, the papers' claims and every run. No network: nothing here fetches anything. Sets
 * window.__lrsweepReady = true once drawn. Every verdict comes in the data (analysis/lrsweep.py). */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("lrsweep-data").textContent);
  var app = document.getElementById("app"), el = helpers.el;

  function cell(x, d) {  // a table cell: d significant digits, trailing zeros dropped
    if (x === null || x === undefined) return "-";
    if (typeof x === "boolean") return x ? "yes" : "no";
    var s = Number(x).toPrecision(d || 3);
    return s.indexOf(".") >= 0 && s.indexOf("e") < 0 ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
  }
  function lrName(lr) { var e = Math.floor(Math.log10(lr) + 1e-9), m = Math.round(lr / Math.pow(10, e)); return m + "e" + e; }
  function runsOf(v) { return D.runs.filter(function (r) { return r.variant === v; }); }

  // one chart in `charts`: x = the LR (log scale), y = a run field, one line per variant; a variant's diverged runs as
  // open dots of its colour (at `capAt`, the initial loss, when the field has no value)
  function lrChart(title, field, yTitle, log, capAt) {
    var box = el("div", {"class": "chart", "data-field": field});
    box.appendChild(el("h2", {}, title));
    charts.appendChild(box);  // in the page first: the chart takes its width from its box
    var lrs = D.lrs.slice().sort(function (a, b) { return a - b; }), lines = [], any = false;
    D.variants.forEach(function (v, i) {
      var ok = lrs.map(function () { return null; }), bad = ok.slice();
      runsOf(v.name).forEach(function (r) {
        var y = r[field];
        if (y === null && capAt) y = r[capAt];  // a diverged run's final loss: drawn at its initial loss
        if (y === null) return;
        (r.diverged ? bad : ok)[lrs.indexOf(r.lr)] = y;
        any = true;
      });
      lines.push({ label: v.name, y: ok, color: helpers.color(i), points: true });
      if (bad.some(function (y) { return y !== null; }))
        lines.push({ label: v.name + " diverged", y: bad, color: helpers.color(i), dotsOnly: true });
    });
    if (!any) { box.appendChild(el("p", {"class": "sub"}, "no run carries this signal")); return; }
    chart.lines(box, { x: lrs, xLabel: "peak learning rate (log scale)", yLabel: yTitle + (log ? " (log scale)" : ""),
                       xLog: true, yLog: log, width: Math.max(360, box.clientWidth - 20), height: 260, lines: lines });
  }

  app.appendChild(el("p", {"class": "sub"}, "Grid '" + D.grid + "': " + D.runs.length + " runs, each a whole run of " + D.steps +
    " steps (warmup " + D.warmup_steps + ", cosine to lr_max / 10) at one peak LR, seed " + D.seed + ", preset " + D.preset +
    " (" + D.params.toLocaleString() + " parameters), commit " + (D.commit || "unknown") + ". Final loss: median training loss over the last 10% " +
    "of steps; a diverged run (an open dot) is drawn at its initial loss, as the LR sensitivity counts it. Each point links to nothing here: " +
    "the table at the bottom links every run's dashboard."));
  var charts = el("div", {"class": "charts"});
  app.appendChild(charts);
  [["Final training loss against the learning rate", "final_loss", "final loss (nats)", false, "initial_loss"],
   ["Largest pre-softmax attention logit", "attn_logit_max", "max q\u00b7k/\u221ad", true],
   ["Largest |mean log Z| of the output logits", "logz_mean_far", "|log Z| (nats)", true],
   ["Smallest attention entropy over heads", "attn_entropy_min", "entropy (nats)", false],
   ["Largest update RMS sqrt(mean(g\u00b2/v\u0302))", "rms_max", "RMS", true]].forEach(function (c) {
    lrChart(c[0], c[1], c[2], c[3], c[4]);
  });

  app.appendChild(el("h2", {}, "LR sensitivity (lower is better)"));
  var st = el("table", {});
  st.appendChild(el("tr", {})).innerHTML = "<th>variant</th><th>what</th><th>LR sensitivity (nats)</th><th>best final loss</th><th>at LR</th>";
  D.variants.forEach(function (v) {
    var s = D.sensitivity[v.name] || {}, tr = el("tr", {});
    [v.name, v.what, cell(s.sensitivity, 3), cell(s.best_loss, 3), s.best_lr ? lrName(s.best_lr) : "-"].forEach(function (c) { tr.appendChild(el("td", {}, c)); });
    st.appendChild(tr);
  });
  app.appendChild(st);

  app.appendChild(el("h2", {}, "The papers' claims against this model"));
  var ct = el("table", {});
  ct.appendChild(el("tr", {})).innerHTML = "<th>claim</th><th>what the paper reports</th><th>what this sweep shows</th><th>verdict</th>";
  D.claims.forEach(function (c) {
    var tr = el("tr", {});
    tr.appendChild(el("td", {}, c.id)); tr.appendChild(el("td", {}, c.paper)); tr.appendChild(el("td", {}, c.observed));
    tr.appendChild(el("td", {"class": c.verdict === "reproduced" ? "reproduced" : c.verdict === "partly" ? "partly" : "not"}, c.verdict));
    ct.appendChild(tr);
  });
  app.appendChild(ct);

  app.appendChild(el("h2", {}, "Natural failures of the plain model, labelled by intervention"));
  var nt = el("table", {});
  nt.appendChild(el("tr", {})).innerHTML = "<th>LR</th><th>why it failed</th><th>interventions that alone remove it</th><th>label</th>";
  D.natural_cases.forEach(function (c) {
    var tr = el("tr", {});
    [lrName(c.lr), c.why, c.removed_by.join(", ") || "none", c.cause || "none (several or no intervention)"].forEach(function (x) { tr.appendChild(el("td", {}, x)); });
    nt.appendChild(tr);
  });
  if (!D.natural_cases.length) nt.appendChild(el("tr", {})).appendChild(el("td", {colspan: 4}, "no plain run failed"));
  app.appendChild(nt);

  app.appendChild(el("h2", {}, "Every run"));
  var rt = el("table", {});
  rt.appendChild(el("tr", {})).innerHTML = "<th>variant</th><th>LR</th><th>final loss</th><th>final val loss</th><th>largest attention logit</th>" +
    "<th>smallest entropy</th><th>|mean log Z| max</th><th>update RMS max</th><th>loss spikes</th><th>dashboard</th>";
  D.runs.forEach(function (r) {
    var tr = el("tr", {}), fail = D.failures[r.variant + "@" + lrName(r.lr)];
    [r.variant, lrName(r.lr), r.diverged ? "diverged at " + r.diverged_at : cell(r.final_loss, 4), cell(r.final_val_loss, 4),
     cell(r.attn_logit_max, 4), cell(r.attn_entropy_min, 3), cell(r.logz_mean_far, 3), cell(r.rms_max, 3),
     r.spikes.length ? r.spikes.join(", ") : "-"].forEach(function (x, i) {
      tr.appendChild(el("td", i === 2 && fail ? {"class": "failed", title: fail} : {}, x));
    });
    var td = el("td", {}); td.appendChild(el("a", {href: r.dashboard}, "dashboard")); tr.appendChild(td);
    rt.appendChild(tr);
  });
  app.appendChild(rt);
  window.__lrsweepReady = true;
})();
