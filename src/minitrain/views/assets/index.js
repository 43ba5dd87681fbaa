/* index.js: the runs table (views/index.py). Sorts by any column (click its head again to reverse), filters
 * by the text of a row, and compares the ticked runs: from disk, on this page (their loss, validation loss,
 * learning rate and gradient norm on shared step axes, from the compact series embedded in the page);
 * served by `minitrain serve`, in one full dashboard (/view?run=A&run=B), while the table's steps, status and verdicts
 * are polled every 2 s. Every string reaches the page through textContent. window.__indexReady is set once
 * the table is wired (the tests wait on it). */
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('index-data').textContent);
  var body = document.querySelector('#runs tbody'), filter = document.getElementById('filter');
  var button = document.getElementById('compare-button'), shown = document.getElementById('shown');
  var byRun = {}, sortCol = null, sortDir = 1, ticked = {};
  var COLS = D.columns.slice(1);  // after "run"
  var SERIES = [['loss', 'training loss (nats)', false], ['val_loss', 'validation loss (nats)', false],
                ['lr', 'learning rate', false], ['grad_norm', 'gradient norm before clipping (log)', true]];
  var el = helpers.el;
  function index(rows) { byRun = {}; rows.forEach(function (r) { byRun[r.run] = r; }); }

  // a row built from its data (served mode: rows come and go while the page is open)
  function makeRow(r) {
    var tr = el('tr', r.status); tr.setAttribute('data-run', r.run);
    var td0 = el('td');
    if (r.kind !== 'sweep') { var cb = el('input', 'tick'); cb.type = 'checkbox'; cb.checked = !!ticked[r.run]; td0.appendChild(cb); }
    tr.appendChild(td0);
    var name = el('td'); name.setAttribute('data-col', 'run');
    var a = el('a', '', r.run);
    a.href = !D.served ? r.link : r.kind === 'sweep' ? '/file/' + r.link : '/view?run=' + encodeURIComponent(r.run);
    name.appendChild(a);
    if (r.error) name.appendChild(el('div', 'rowerr', r.error));
    tr.appendChild(name);
    if (r.kind === 'sweep') { tr.className = 'sweep'; var n = el('td', '', 'regime map'); tr.appendChild(n); var d = el('td', '', r.note); d.colSpan = 8; tr.appendChild(d); return tr; }
    COLS.forEach(function (k) {
      var td = el('td', k === 'verdict' && r.sealed ? 'sealed' : '', r[k] === null || r[k] === undefined ? '' : r[k]);
      td.setAttribute('data-col', k); tr.appendChild(td);
    });
    return tr;
  }
  function rowsInDom() { return Array.prototype.slice.call(body.querySelectorAll('tr[data-run]')); }

  function value(run, col) {
    var r = byRun[run] || {};
    return col === 'run' ? run : r[col];
  }
  function compare(a, b) {
    var x = value(a.getAttribute('data-run'), sortCol), y = value(b.getAttribute('data-run'), sortCol);
    var nx = x === null || x === undefined || x === '', ny = y === null || y === undefined || y === '';
    if (nx || ny) return nx === ny ? 0 : nx ? 1 : -1;  // empty cells last in both directions
    if (typeof x === 'number' && typeof y === 'number') return sortDir * (x - y);
    return sortDir * String(x).localeCompare(String(y), undefined, { numeric: true });
  }
  function applySort() {
    if (!sortCol) return;
    rowsInDom().sort(compare).forEach(function (tr) { body.appendChild(tr); });
    document.querySelectorAll('#runs th').forEach(function (th) {
      th.className = th.getAttribute('data-col') === sortCol ? (sortDir > 0 ? 'asc' : 'desc') : '';
    });
  }
  function applyFilter() {
    var terms = filter.value.toLowerCase().split(/\s+/).filter(Boolean), n = 0, all = rowsInDom();
    all.forEach(function (tr) {
      var text = tr.textContent.toLowerCase();
      var ok = terms.every(function (t) { return text.indexOf(t) >= 0; });
      tr.hidden = !ok; if (ok) n++;
    });
    shown.textContent = terms.length ? n + ' of ' + all.length + ' runs shown' : all.length + ' runs';
  }
  function wireTicks() {
    body.querySelectorAll('input.tick').forEach(function (cb) {
      cb.onchange = function () {
        ticked[cb.closest('tr').getAttribute('data-run')] = cb.checked;
        button.disabled = chosen().length === 0;
      };
    });
  }
  function chosen() {
    return rowsInDom().map(function (tr) { return tr.getAttribute('data-run'); }).filter(function (r) { return ticked[r]; });
  }

  // ---- the comparison of the ticked runs on this page (from disk) ----
  function drawCompare(runs) {
    var box = document.getElementById('compare');
    box.textContent = '';
    box.appendChild(el('h2', '', 'Ticked runs compared: ' + runs.join(', ')));
    var w = Math.max(360, Math.floor((box.clientWidth || 900) / 2) - 24);
    SERIES.forEach(function (s) {
      var xsSet = {}, xs = [];
      runs.forEach(function (r) { var c = D.series[r]; if (c) c.steps.forEach(function (x) { if (!xsSet[x]) { xsSet[x] = 1; xs.push(x); } }); });
      xs.sort(function (a, b) { return a - b; });
      var pos = {}; xs.forEach(function (x, i) { pos[x] = i; });
      var lines = runs.map(function (r, i) {
        var c = D.series[r], col = new Array(xs.length).fill(null);
        if (c) c.steps.forEach(function (x, j) { col[pos[x]] = c[s[0]][j]; });
        return { label: r, y: col, color: helpers.color(i), points: s[0] === 'val_loss', span: s[0] === 'val_loss' };
      });
      var p = el('div', 'cpanel'); p.setAttribute('data-series', s[0]);
      p.appendChild(el('h2', '', s[1]));
      box.appendChild(p);
      if (!xs.length) { p.appendChild(el('div', 'hint', 'no data')); return; }
      chart.lines(p, { x: xs, xLabel: 'step', yLog: s[2], width: w, lines: lines });
    });
  }
  button.addEventListener('click', function () {
    var runs = chosen();
    if (!runs.length) return;
    if (D.served) { window.location.href = '/view?' + runs.map(function (r) { return 'run=' + encodeURIComponent(r); }).join('&'); return; }
    drawCompare(runs);
  });

  // ---- served: live steps, status and verdicts ----
  function poll() {
    fetch('/api/runs', { cache: 'no-store' }).then(function (res) { return res.json(); }).then(function (rows) {
      document.getElementById('live-error').textContent = '';
      index(rows);
      body.textContent = '';
      rows.forEach(function (r) { body.appendChild(makeRow(r)); });
      if (!rows.length) { var tr = el('tr'), td = el('td', '', 'no run folders here yet'); td.colSpan = 11; tr.appendChild(td); body.appendChild(tr); }
      wireTicks(); applySort(); applyFilter();
      button.disabled = chosen().length === 0;
      window.__indexPolls = (window.__indexPolls || 0) + 1;
    }).catch(function (e) {
      document.getElementById('live-error').textContent = 'the server does not answer (' + e.message + '); the table shows the last rows it sent';
    }).then(function () { setTimeout(poll, 2000); });
  }

  index(D.rows);
  document.querySelectorAll('#runs th[data-col]').forEach(function (th) {
    var col = th.getAttribute('data-col');
    if (col === 'tick') return;
    th.addEventListener('click', function () {
      sortDir = sortCol === col ? -sortDir : 1; sortCol = col; applySort();
    });
  });
  filter.addEventListener('input', applyFilter);
  if (D.served) {  // links go to the server's pages
    rowsInDom().forEach(function (tr) {
      var a = tr.querySelector('td[data-col=run] a'), run = tr.getAttribute('data-run');
      if (a && byRun[run]) a.href = byRun[run].kind === 'sweep' ? '/file/' + byRun[run].link : '/view?run=' + encodeURIComponent(run);
    });
  }
  wireTicks(); applyFilter();
  if (D.served) setTimeout(poll, 2000);
  window.__indexReady = true;
})();
