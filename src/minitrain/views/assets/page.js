/* page.js: the dashboard page, wired: draws the run data embedded in #dashboard-data (helpers.js, panels.js,
 * chart.js and the vendored uPlot are inlined before it). Every panel comes from the panel registry in the
 * data (number, title, y-axis unit, series); all panels share one step axis: drag to zoom, wheel to zoom,
 * shift+drag to pan, double-click to reset, a crosshair and a tooltip with the values at the cursor, a legend
 * whose entries hide/show a series, a smoothing slider, PNG/CSV export, and a run chooser (the runs embedded
 * in the page, plus any other dashboard.html opened from disk). Every string from the data reaches the screen
 * through textContent, never as HTML. Nothing is fetched. Sets window.__dashboardReady = true once the first
 * screen is drawn (panels further down are drawn as they come near the screen); window.__dashboard exposes the
 * plots (and drawAll) for the tests, and the data and redraw for assets/live.js (served pages only). */
(function () {
  'use strict';
  var el = helpers.el, isNum = helpers.isNum;

  var D = JSON.parse(document.getElementById('dashboard-data').textContent);
  var state = { smooth: D.smoothing, x: null, full: [0, 1], shown: {}, extra: [], pick: {} };
  var plots = [];  // {spec, u, root, log, ...}
  var series = panels.create(D, state), ME = series.me;
  var charts = chart.create(D, state, zoomTo, series);
  var allRuns = series.allRuns;

  function makePlot(p) { charts.draw(p); }

  function panelControls(p, ctl) {
    var stat = series.tensorStat(p.spec);
    if (stat && ME.per_tensor) {
      var sel = el('select'); sel.title = 'add any tensor to the plot';
      var o0 = el('option', '', 'movers only'); o0.value = ''; sel.appendChild(o0);
      var oa = el('option', '', 'all ' + ME.per_tensor.names.length + ' tensors'); oa.value = '*'; sel.appendChild(oa);
      ME.per_tensor.names.forEach(function (n, i) { var op = el('option', '', '+ ' + n); op.value = String(i); sel.appendChild(op); });
      sel.addEventListener('change', function () { state.pick[stat] = sel.value; makePlot(p); });
      ctl.appendChild(sel);
    }
    if (p.spec.y_range !== 'symmetric') {  // a difference has signs: no log axis
      var lb = el('button', p.log ? 'on' : '', 'log y'); lb.title = 'switch the y axis between linear and log scale';
      lb.addEventListener('click', function () { p.log = !p.log; lb.className = p.log ? 'on' : ''; makePlot(p); });
      ctl.appendChild(lb);
    }
    var png = el('button', 'export-png', 'PNG'); png.title = 'save this panel as a PNG image';
    png.addEventListener('click', function () { charts.exportPng(p); });
    var csv = el('button', 'export-csv', 'CSV'); csv.title = 'save the data drawn in this panel as CSV';
    csv.addEventListener('click', function () { charts.exportCsv(p); });
    ctl.appendChild(png); ctl.appendChild(csv);
  }

  function buildPanels(grid) {
    D.panels.forEach(function (spec) {
      if (!series.wanted(spec)) return;
      var p = { spec: spec, log: spec.log, u: null };
      var root = p.root = el('div', 'panel' + (spec.wide ? ' wide' : ''));
      root.id = 'panel-' + spec.key; root.setAttribute('data-panel', String(spec.number));
      var head = el('div', 'phead');
      head.appendChild(el('h2', 'ptitle', spec.number + '. ' + spec.title));
      var ctl = el('div', 'ctl'); panelControls(p, ctl); head.appendChild(ctl);
      root.appendChild(head);
      p.note = el('div', 'sub'); root.appendChild(p.note);
      p.box = el('div', 'plot'); root.appendChild(p.box);
      p.box.style.minHeight = (spec.wide ? 360 : 290) + 'px';  // until drawn
      p.empty = el('div', 'empty'); root.appendChild(p.empty);
      grid.appendChild(root);
      plots.push(p);
    });
  }

  function zoomTo(a, b) {  // every drawn panel now; the others read state.x when they are drawn
    a = Math.max(state.full[0], a); b = Math.min(state.full[1], b);
    if (b - a < 2) { var c = (a + b) / 2; a = Math.max(state.full[0], c - 1); b = Math.min(state.full[1], a + 2); }  // layout: 2 steps at least
    var full = a <= state.full[0] && b >= state.full[1];
    state.x = full ? null : [a, b];
    plots.forEach(function (p) {
      if (!p.u) return;
      p.u.setScale('x', { min: a, max: b });
      p.root.setAttribute('data-x0', String(Math.round(a))); p.root.setAttribute('data-x1', String(Math.round(b)));
    });
    var z = document.getElementById('zoom-range');
    if (z) z.textContent = 'steps ' + Math.round(a) + '\u2013' + Math.round(b);
  }
  // Panels are drawn when they come near the screen (an IntersectionObserver), so the first screen is ready
  // without drawing all of them; drawAll() draws every one (the tests and screenshots use it).
  function redrawAll() { plots.forEach(function (p) { if (p.drawn) makePlot(p); }); }
  function drawAll() { plots.forEach(function (p) { if (!p.drawn) makePlot(p); }); }
  function lazyDraw() {
    var seen = window.innerHeight + 300;
    plots.forEach(function (p) { if (p.root.getBoundingClientRect().top < seen) makePlot(p); });
    if (!('IntersectionObserver' in window)) { drawAll(); return; }
    var io = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) {
        if (!e.isIntersecting) return;
        var p = plots.filter(function (q) { return q.root === e.target; })[0];
        if (p && !p.drawn) makePlot(p);
        io.unobserve(e.target);
      });
    }, { rootMargin: '300px 0px' });
    plots.forEach(function (p) { if (!p.drawn) io.observe(p.root); });
  }

  // ---- header, runs, health, stability check, info ------------------------------------------------
  function header(app) {
    var h = el('header', 'top');
    h.appendChild(el('h1', '', D.name));
    document.title = D.name + ' \u00b7 minitrain dashboard';
    var st = el('span'); st.id = 'status-badge'; h.appendChild(st); drawStatus();
    var inj = D.injection || {};
    var b;
    if (inj.withheld) { b = el('span', 'badge blind', 'injection withheld (blind run)'); b.id = 'injection-badge'; b.title = inj.words; }
    else if (inj.name && inj.name !== 'none') { b = el('span', 'badge inj', 'injection at K=' + inj.step + ': ' + inj.words); b.title = inj.words; }
    else b = el('span', 'badge base', 'no injection');
    b.id = 'injection-badge'; h.appendChild(b);
    if (D.sealed) h.appendChild(el('span', 'badge sealed', 'diagnosis sealed'));
    h.appendChild(el('span', 'spacer'));
    var sm = el('label', 'smooth');
    sm.appendChild(el('span', 'muted', 'smoothing '));
    var range = el('input'); range.type = 'range'; range.min = '0'; range.max = '0.99'; range.step = '0.01';
    range.value = String(state.smooth); range.id = 'smoothing';
    var sv = el('span', 'sval', state.smooth.toFixed(2)); sv.id = 'smoothing-value';
    range.addEventListener('input', function () {
      state.smooth = +range.value; sv.textContent = state.smooth.toFixed(2);
      plots.forEach(function (p) { if (series.smoothed(p.spec)) makePlot(p); });
    });
    sm.appendChild(range); sm.appendChild(sv); h.appendChild(sm);
    var z = el('span', 'zoom');
    z.appendChild(el('span', 'muted', 'drag or wheel: zoom \u00b7 shift+drag: pan \u00b7 double-click: reset \u00b7 click a legend entry: hide/show'));
    var r = el('span', ''); r.id = 'zoom-range'; z.appendChild(r);
    var reset = el('button', '', 'Reset zoom'); reset.id = 'reset-zoom';
    reset.addEventListener('click', function () { zoomTo(state.full[0], state.full[1]); });
    z.appendChild(reset);
    if (isNum(inj.step)) {
      var zk = el('button', '', 'Zoom on K'); zk.id = 'zoom-k';
      zk.addEventListener('click', function () { zoomTo(inj.step - 25, inj.step + 125); });
      z.appendChild(zk);
    }
    h.appendChild(z);
    app.appendChild(h);
    if (D.data_note) {
      var n = el('div', 'banner bad', 'Truncated data: ' + D.data_note + ' (a run killed mid-write). Everything up to there is shown.');
      n.id = 'data-note'; app.appendChild(n);
    }
    (D.notes || []).forEach(function (t) { app.appendChild(el('div', 'banner', t)); });
  }

  // the data-dependent parts outside the panels, drawn again on each update of a served page (assets/live.js)
  function drawStatus() {
    var st = document.getElementById('status-badge');
    if (!st) return;
    st.className = 'badge ' + D.status; st.textContent = D.status;
  }
  function drawRange() {
    var z = document.getElementById('zoom-range'), r = state.x || state.full;
    if (z) z.textContent = 'steps ' + Math.round(r[0]) + '\u2013' + Math.round(r[1]);
  }
  function refresh() {
    drawStatus(); drawRange(); fillHealth(); fillStability(); redrawAll();
  }

  function runChooser(main) {
    var sec = el('section', 'runs'); sec.id = 'runs';
    sec.appendChild(el('span', 'hl', 'Runs on this page: '));
    var list = el('span', 'runlist'); sec.appendChild(list);
    function redraw() {
      list.textContent = '';
      allRuns().forEach(function (run, i) {
        var lab = el('label', 'runitem'), cb = el('input'); cb.type = 'checkbox';
        cb.checked = !!state.shown[run.name]; cb.disabled = run === ME; cb.setAttribute('data-run', run.name);
        cb.addEventListener('change', function () { state.shown[run.name] = cb.checked; redrawAll(); });
        var sw = el('span', 'tsw'); sw.style.background = run === ME ? '#1a5fb4' : series.runColor(run, i);
        lab.appendChild(cb); lab.appendChild(sw);
        lab.appendChild(document.createTextNode(run.name + (run === ME ? ' (this run)' : run.role === 'baseline' ? ' (baseline)' : '')));
        list.appendChild(lab);
      });
    }
    var add = el('label', 'addrun'), file = el('input');
    add.appendChild(document.createTextNode('add a run: open its dashboard.html '));
    file.type = 'file'; file.accept = '.html'; file.id = 'add-run';
    file.addEventListener('change', function () {
      Array.prototype.forEach.call(file.files, function (f) {
        var rd = new FileReader();
        rd.onload = function () {
          var other = null;
          try {  // parsed as an inert document: nothing in it runs
            var block = new DOMParser().parseFromString(String(rd.result), 'text/html').getElementById('dashboard-data');
            other = block && JSON.parse(block.textContent);
          } catch (e) { other = null; }
          if (!other || !other.runs) { sec.appendChild(el('span', 'bad', ' ' + f.name + ' is not a minitrain dashboard')); return; }
          var run = other.runs[0];
          if (state.shown[run.name] !== undefined) return;
          state.extra.push({ name: run.name, role: 'compare', steps: run.steps, series: run.series });
          state.shown[run.name] = true;
          redraw(); redrawAll();
        };
        rd.readAsText(f);
      });
    });
    add.appendChild(file); sec.appendChild(add);
    allRuns().forEach(function (r) { state.shown[r.name] = true; });
    redraw();
    main.appendChild(sec);
  }

  function healthSection(main) {
    var sec = el('section', 'health'); sec.id = 'health';
    main.appendChild(sec);
    fillHealth();
  }
  function fillHealth() {
    var sec = document.getElementById('health');
    sec.textContent = '';
    var marks = { ok: '\u2713', warn: '!', bad: '\u2717', info: '\u00b7' };
    (D.health || []).forEach(function (it) {
      var d = el('div', 'hitem ' + it.verdict), l = el('div', 'hv');
      l.appendChild(el('span', 'mark', marks[it.verdict] || ''));
      l.appendChild(el('span', 'hl', it.label + ': '));
      l.appendChild(document.createTextNode(it.value));
      d.appendChild(l);
      if (it.detail) d.appendChild(el('div', 'hd', it.detail));
      d.title = it.label + ': ' + it.value + (it.detail ? ' (' + it.detail + ')' : '');
      sec.appendChild(d);
    });
  }

  var stabilitySlot = null;
  function stabilitySection(main) {
    stabilitySlot = el('div'); main.appendChild(stabilitySlot);
    fillStability();
  }
  function fillStability() {  // a sealed page's `checks` hold the signals alone (analysis leaves the answers out)
    var ck = D.checks, main = stabilitySlot;
    main.textContent = '';
    if (!ck || !ck.questions || !ck.questions.length) return;
    var sec = el('section', 'info'); sec.id = 'stability';
    sec.appendChild(el('h2', '', 'Stability check: every question of stability-check.md, measured on this run'));
    var body = el('div', 'stab'), v = ck.verdict;
    body.appendChild(el('p', 'verdict', 'The walker\u2019s verdict (first matching leaf): ' + v.leaf + ' ' + v.title +
                        (v.anomaly_step !== null && v.anomaly_step !== undefined ? ' at step ' + v.anomaly_step : '') + ' (cause: ' + v.cause + ')' +
                        (v.partial ? ' \u2014 ' + v.partial : '')));
    var t = el('table', 'nodes'), hr = el('tr');
    ['node', 'question', 'read it on', 'threshold', 'measured', 'answer'].forEach(function (c) { hr.appendChild(el('th', '', c)); });
    t.appendChild(hr);
    ck.questions.forEach(function (n) {
      var tr = el('tr', n.answer === 'yes' ? 'yes' : '');
      [n.id, n.question, n.panel, n.threshold, n.measured + (n.step !== null && n.step !== undefined ? ' (step ' + n.step + ')' : ''), n.answer]
        .forEach(function (c) { tr.appendChild(el('td', '', c)); });
      t.appendChild(tr);
    });
    body.appendChild(t);
    sec.appendChild(body);
    main.appendChild(sec);
  }

  function kvTable(obj, keys) {
    var t = el('table', 'kv');
    (keys || Object.keys(obj)).forEach(function (k) {
      if (!(k in obj)) return;
      var tr = el('tr'), v = obj[k];
      tr.appendChild(el('td', 'k', k));
      tr.appendChild(el('td', '', v !== null && typeof v === 'object' ? JSON.stringify(v) : (v === null ? 'null' : String(v))));
      t.appendChild(tr);
    });
    return t;
  }
  function infoSections(main) {
    var man = D.manifest || {}, res = D.results;
    if (D.diagnosis || D.diagnosis_note) {
      var ds = el('section', 'info diagnosis'); ds.id = 'diagnosis';
      ds.appendChild(el('h2', '', 'Diagnosis'));
      if (D.diagnosis_note) ds.appendChild(el('p', 'muted', D.diagnosis_note));
      if (D.diagnosis) {
        var d = D.diagnosis, dt = el('table', 'kv'), order = ['leaf', 'cause', 'anomaly_step', 'diagnosis', 'remediation', 'path'];
        order.concat(Object.keys(d).filter(function (k) { return order.indexOf(k) < 0 && k !== 'walk' && k !== 'evidence'; })).forEach(function (k) {
          if (!(k in d)) return;
          var v = d[k], txt = Array.isArray(v) ? v.map(function (x) { return typeof x === 'object' ? JSON.stringify(x) : String(x); }).join(' \u2192 ')
            : v !== null && typeof v === 'object' ? JSON.stringify(v) : String(v);
          var tr = el('tr'); tr.appendChild(el('td', 'k', k)); tr.appendChild(el('td', '', txt)); dt.appendChild(tr);
        });
        ds.appendChild(dt);
      }
      main.appendChild(ds);
    }
    var sec = el('section', 'info'); sec.id = 'manifest';
    sec.appendChild(el('h2', '', 'Run manifest'));
    sec.appendChild(kvTable(man, ['name', 'status', 'seed', 'git_sha', 'config_hash', 'trunk_hash', 'data_manifest_hash',
                                  'started', 'ended', 'forked_from', 'resumed_from_step', 'schema_version']));
    var inj = man.injection || {};
    sec.appendChild(el('h3', '', 'Injection'));
    var flat = {}; Object.keys(inj).forEach(function (k) { if (k !== 'record') flat[k] = inj[k]; });
    sec.appendChild(kvTable(flat));
    if (inj.record) { sec.appendChild(el('h3', '', 'Injection record (what it touched when it fired)')); sec.appendChild(kvTable(inj.record)); }
    sec.appendChild(el('h3', '', 'Versions and hardware'));
    sec.appendChild(kvTable(Object.assign({}, man.versions || {}, man.hardware || {})));
    sec.appendChild(el('h3', '', 'Config'));
    sec.appendChild(el('p', 'muted', 'the injection settings its injection does not read are left out (they are in the full manifest below)'));
    var c3 = el('div', 'cols3'); c3.appendChild(kvTable(D.config_applied || man.config || {})); sec.appendChild(c3);
    var det = el('details'); det.appendChild(el('summary', '', 'full manifest.json'));
    det.appendChild(el('pre', 'raw', JSON.stringify(man, null, 2))); sec.appendChild(det);
    main.appendChild(sec);
    var rs = el('section', 'info'); rs.id = 'results';
    rs.appendChild(el('h2', '', 'Results (results.json)'));
    if (res) rs.appendChild(kvTable(res)); else rs.appendChild(el('p', 'muted', 'no results.json: the run has not finished (or was killed)'));
    main.appendChild(rs);
    main.appendChild(el('p', 'muted', 'Written ' + D.generated + ' by minitrain. Charts: uPlot (MIT), inlined. Values that ' +
                        'cannot be drawn (missing, non-finite, or \u2264 0 on a log axis) are gaps.'));
  }

  function init() {
    var app = document.getElementById('app');
    header(app);
    var main = el('main'); app.appendChild(main);
    healthSection(main);
    runChooser(main);
    var grid = el('div', 'grid'); grid.id = 'panels'; main.appendChild(grid);
    var lo = Infinity, hi = -Infinity;
    D.runs.forEach(function (r) { if (r.steps.length) { lo = Math.min(lo, r.steps[0]); hi = Math.max(hi, r.steps[r.steps.length - 1]); } });
    if (!(lo <= hi)) { lo = 0; hi = 1; }
    if (hi <= lo) hi = lo + 1;
    state.full = [lo, hi];
    buildPanels(grid);
    stabilitySection(main);
    infoSections(main);
    lazyDraw();
    drawRange();
    var timer = null;
    window.addEventListener('resize', function () {
      clearTimeout(timer);
      timer = setTimeout(function () { plots.forEach(function (p) { if (p.u) p.u.setSize({ width: charts.width(p), height: p.u.height }); }); }, 120);
    });
    window.__dashboard = { plots: plots, state: state, zoomTo: zoomTo, drawAll: drawAll, data: D, redraw: redrawAll,
                           refresh: refresh };
    // uPlot paints in a microtask after each plot is made: ready once the first screen is on it
    requestAnimationFrame(function () { window.__dashboardReady = true; });
  }

  try { init(); } catch (err) {
    var b = el('div', 'banner bad', 'The dashboard script failed: ' + (err && err.message) + '. The data is in the page source (#dashboard-data).');
    document.body.insertBefore(b, document.body.firstChild);
    throw err;
  }
})();
