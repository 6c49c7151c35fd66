/* Pontoon dashboard: polls the manager's REST API (/api/v1/) every 2 s with
 * the API token and updates the page in place. No framework; charts with
 * the vendored uPlot. Everything shown comes from the API's JSON, inserted
 * as text (never as HTML). */
(function () {
  'use strict';

  const POLL_MS = 2000;
  // Endpoints the visible page does not show are refreshed every this many polls.
  const SLOW_EVERY = 5;
  const TOKEN_KEY = 'pontoon.api_token';
  const PAGES = ['overview', 'osds', 'pools', 'capacity', 'endurance'];
  // Recovery rate: measured over the last this many polls.
  const RATE_WINDOW = 15;

  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------ formatting

  function fmtBytes(n) {
    if (n == null || !isFinite(n)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
    let v = Math.abs(n);
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    const digits = i === 0 ? 0 : v >= 100 ? 0 : v >= 10 ? 1 : 2;
    return (n < 0 ? '-' : '') + v.toFixed(digits) + ' ' + units[i];
  }
  function fmtNum(n, digits) {
    if (n == null || !isFinite(n)) return '–';
    return Number(n).toLocaleString('en-US', { maximumFractionDigits: digits == null ? 1 : digits });
  }
  function fmtPct(r) {
    return r == null || !isFinite(r) ? '–' : (r * 100).toFixed(1) + '%';
  }
  function fmtDuration(secs) {
    if (secs == null || !isFinite(secs)) return '–';
    const s = Math.max(0, Math.round(secs));
    const pad = (x) => String(x).padStart(2, '0');
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + pad(s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h' + pad(Math.floor(s % 3600 / 60)) + 'm';
    return Math.floor(s / 86400) + 'd' + pad(Math.floor(s % 86400 / 3600)) + 'h';
  }
  function fmtDays(d) {
    if (d == null || !isFinite(d)) return '–';
    if (d <= 0) return 'now';
    if (d < 1) return fmtDuration(d * 86400);
    if (d < 730) return d.toFixed(d < 10 ? 1 : 0) + ' days';
    return (d / 365.25).toFixed(1) + ' years';
  }
  function fmtDate(unix) {
    if (unix == null) return '–';
    return new Date(unix * 1000).toISOString().slice(0, 10);
  }
  function sum(list, f) {
    return (list || []).reduce((a, x) => a + (f(x) || 0), 0);
  }

  // ---------------------------------------------------------- DOM helpers

  function setText(id, text) {
    const e = typeof id === 'string' ? $(id) : id;
    if (e && e.textContent !== text) e.textContent = text;
    return e;
  }
  function setBytes(id, n) {
    const e = setText(id, fmtBytes(n));
    if (e) e.dataset.bytes = n == null ? '' : String(n);
    return e;
  }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }
  function setBar(fill, ratio, cls) {
    const pct = Math.max(0, Math.min(1, ratio || 0)) * 100;
    fill.style.width = pct.toFixed(1) + '%';
    fill.className = 'fill' + (cls ? ' ' + cls : '');
  }

  // A cell: a string, or {text, cls, bytes, bar, barCls, title}.
  function setCell(td, c) {
    if (c == null || typeof c !== 'object') c = { text: c == null ? '–' : String(c) };
    if (c.bar != null) {
      let bar = td.querySelector('.bar');
      if (!bar) {
        td.textContent = '';
        bar = el('div', 'bar');
        bar.appendChild(el('div', 'fill'));
        td.appendChild(bar);
        td.appendChild(el('span'));
      }
      setBar(bar.firstChild, c.bar, c.barCls);
      setText(td.lastChild, ' ' + c.text);
    } else if (td.textContent !== c.text || td.children.length) {
      td.textContent = c.text;
    }
    const cls = c.cls || (c.bytes != null || c.num ? 'num' : '');
    if (td.className !== cls) td.className = cls;
    if (c.bytes != null) td.dataset.bytes = String(c.bytes);
    else if (td.dataset.bytes != null) delete td.dataset.bytes;
    if (c.title) td.title = c.title;
  }

  // Makes tbody's rows those of items (keyed: rows are reused, in place).
  function syncRows(tbody, items, key, cells) {
    const old = new Map();
    for (const tr of Array.from(tbody.rows)) old.set(tr.dataset.key, tr);
    items.forEach((item, i) => {
      const k = String(key(item));
      let tr = old.get(k);
      if (tr) old.delete(k);
      else { tr = document.createElement('tr'); tr.dataset.key = k; }
      const cs = cells(item);
      while (tr.cells.length < cs.length) tr.insertCell();
      while (tr.cells.length > cs.length) tr.deleteCell(-1);
      cs.forEach((c, j) => setCell(tr.cells[j], c));
      if (tbody.rows[i] !== tr) tbody.insertBefore(tr, tbody.rows[i] || null);
    });
    for (const tr of old.values()) tr.remove();
  }

  // ---------------------------------------------------------- token, pages

  // The fragment: `#page`, `#token=T`, `#token=T&page=capacity`, `#capacity&token=T`.
  function parseHash() {
    let page = null;
    let token = null;
    for (const part of location.hash.replace(/^#\/?/, '').split('&')) {
      if (!part) continue;
      const eq = part.indexOf('=');
      if (eq < 0) { page = decodeURIComponent(part); continue; }
      const k = part.slice(0, eq);
      const v = decodeURIComponent(part.slice(eq + 1));
      if (k === 'token') token = v;
      else if (k === 'page') page = v;
    }
    return { page: PAGES.includes(page) ? page : null, token };
  }

  // Keeps a token from the fragment and takes it out of the address bar.
  function takeHash() {
    const h = parseHash();
    if (h.token) {
      sessionStorage.setItem(TOKEN_KEY, h.token);
      history.replaceState(null, '', location.pathname + location.search + '#' + (h.page || 'overview'));
    }
    return h.page || currentPage() || 'overview';
  }

  let page = 'overview';
  function currentPage() { return page; }

  function showPage(p) {
    page = p;
    for (const s of document.querySelectorAll('section.page')) s.hidden = s.dataset.page !== p;
    for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === p);
    document.title = 'Pontoon · ' + p;
    render();
  }

  function showLogin(message) {
    $('login').hidden = false;
    $('main').hidden = true;
    setText('login-error', message || '');
    $('login-token').focus();
  }
  function hideLogin() {
    $('login').hidden = true;
    $('main').hidden = false;
  }

  // ------------------------------------------------------------ the API

  class AuthError extends Error {}
  class MissingError extends Error {}

  async function api(path) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) throw new AuthError('');
    const r = await fetch(path, { headers: { Authorization: 'Bearer ' + token }, cache: 'no-store' });
    if (r.status === 401) throw new AuthError('The manager refused the token.');
    if (r.status === 404) throw new MissingError(path);
    if (!r.ok) {
      let msg = r.statusText;
      try { msg = (await r.json()).error || msg; } catch (e) { /* not JSON */ }
      throw new Error(path + ': ' + r.status + ' ' + msg);
    }
    return r.json();
  }

  const data = {};           // latest answer of each endpoint
  const missing = new Set(); // endpoints this manager does not have (404)
  let pollNo = 0;
  let busy = false;

  async function poll() {
    if (busy) return;
    if (!sessionStorage.getItem(TOKEN_KEY)) {
      if ($('login').hidden) showLogin('');
      return;
    }
    busy = true;
    try {
      const p = currentPage();
      const slow = pollNo % SLOW_EVERY === 0;
      const want = { status: '/api/v1/status', df: '/api/v1/df' };
      if (!missing.has('health')) want.health = '/api/v1/health';
      if (slow || ['overview', 'osds', 'capacity'].includes(p)) want.history = '/api/v1/df/history?series=cluster';
      if (slow || p === 'endurance') want.endurance = '/api/v1/endurance';
      if (slow || p === 'pools') want.pools = '/api/v1/pools';
      const keys = Object.keys(want).filter((k) => k === 'health' || !missing.has(k));
      const results = await Promise.allSettled(keys.map((k) => api(want[k])));
      let auth = null;
      const errors = [];
      results.forEach((r, i) => {
        const k = keys[i];
        if (r.status === 'fulfilled') data[k] = r.value;
        else if (r.reason instanceof AuthError) auth = r.reason.message;
        else if (r.reason instanceof MissingError) missing.add(k);
        else errors.push(r.reason.message || String(r.reason));
      });
      if (auth != null) { showLogin(auth); return; }
      hideLogin();
      if (data.status) trackRecovery(data.status);
      render();
      const upd = $('updated');
      if (errors.length) {
        upd.dataset.state = 'error';
        setText(upd, 'error: ' + errors[0]);
      } else {
        upd.dataset.state = 'ok';
        setText(upd, 'updated ' + new Date().toLocaleTimeString());
      }
    } catch (e) {
      $('updated').dataset.state = 'error';
      setText('updated', 'cannot reach the manager: ' + e.message);
    } finally {
      busy = false;
      pollNo++;
    }
  }

  // ------------------------------------------------------------ rendering

  function render() {
    const parts = [renderHealth, renderOverview, renderOsds, renderPools, renderCapacity, renderEndurance];
    for (const f of parts) {
      try { f(); } catch (e) { console.error(e); }
    }
  }

  function health() {
    return data.health || (data.status && data.status.health) || null;
  }

  function renderHealth() {
    const h = health();
    if (!h) return;
    for (const id of ['health-status', 'health-badge']) {
      const e = setText(id, h.status);
      e.dataset.status = h.status;
    }
    const ul = $('health-checks');
    const old = new Map(Array.from(ul.children).map((li) => [li.dataset.code, li]));
    (h.checks || []).forEach((c, i) => {
      let li = old.get(c.code);
      if (li) old.delete(c.code);
      else { li = el('li'); li.dataset.code = c.code; }
      li.dataset.severity = c.severity;
      li.textContent = '';
      li.appendChild(el('span', 'code', c.code));
      li.appendChild(el('span', 'summary', c.summary));
      if (c.detail && c.detail.length) {
        const d = el('ul');
        for (const line of c.detail) d.appendChild(el('li', null, line));
        li.appendChild(d);
      }
      if (ul.children[i] !== li) ul.insertBefore(li, ul.children[i] || null);
    });
    for (const li of old.values()) li.remove();
    $('health-none').hidden = (h.checks || []).length > 0;
  }

  // Recovery progress between polls (the status has object counts).
  const recovery = { samples: [], peak: 0 };
  function trackRecovery(st) {
    const o = st.objects || {};
    const left = Math.max(o.missing || 0, o.degraded || 0);
    const now = Date.now() / 1000;
    recovery.samples.push({ t: now, left });
    if (recovery.samples.length > RATE_WINDOW) recovery.samples.shift();
    recovery.peak = left === 0 ? 0 : Math.max(recovery.peak, left);
  }

  function renderRecovery(st) {
    const o = st.objects || {};
    const left = Math.max(o.missing || 0, o.degraded || 0);
    setText('objects-total', fmtNum(o.total, 0));
    setText('objects-degraded', fmtNum(o.degraded, 0));
    setText('objects-missing', fmtNum(o.missing, 0));
    setText('objects-recovered', fmtNum(o.recovered, 0));
    const box = $('recovery');
    const eta = $('recovery-eta');
    if (left === 0) {
      box.dataset.state = 'clean';
      setText('recovery-text', 'Nothing to recover: every object has all its copies.');
      setBar($('recovery-bar'), 1);
      setText('recovery-rate', '–');
      setText(eta, '–');
      eta.dataset.secs = '';
      return;
    }
    box.dataset.state = 'recovering';
    setText('recovery-text', fmtNum(left, 0) + ' objects to recover (' + fmtNum(o.degraded, 0) +
      ' degraded, ' + fmtNum(o.missing, 0) + ' missing)');
    setBar($('recovery-bar'), recovery.peak > 0 ? (recovery.peak - left) / recovery.peak : 0);
    let rate = null;
    let etaSecs = null;
    if (st.recovery && st.recovery.objects_per_sec != null) {
      rate = st.recovery.objects_per_sec;
      etaSecs = st.recovery.eta_secs;
    } else {
      const s = recovery.samples;
      const first = s[0];
      const last = s[s.length - 1];
      if (s.length >= 2 && last.t > first.t) {
        rate = Math.max(0, (first.left - last.left) / (last.t - first.t));
        etaSecs = rate > 0 ? left / rate : null;
      }
    }
    setText('recovery-rate', rate == null ? 'measuring…' : fmtNum(rate, 1) + ' objects/s');
    setText(eta, etaSecs == null ? (rate == null ? 'measuring…' : 'no progress yet') : fmtDuration(etaSecs));
    eta.dataset.secs = etaSecs == null ? '' : String(Math.round(etaSecs));
  }

  function clusterRates() {
    const h = data.history;
    return h && (h.rates || []).find((r) => r.id === 'cluster');
  }

  function renderOverview() {
    const st = data.status;
    if (st) {
      setText('cluster-name', st.cluster ? 'cluster ' + st.cluster + ' · epoch ' + st.epoch : '');
      setText('osd-count', String(st.osds.total));
      setText('osd-up', String(st.osds.up));
      setText('osd-in', String(st.osds.in));
      setText('manager', st.manager || 'none');
      setText('pg-count', String(st.pgs.total));
      const states = Object.entries(st.pgs.states || {}).sort((a, b) => b[1] - a[1]);
      syncList($('pg-states'), states.map(([k, n]) => [k, n + ' ' + k]));
      setText('pool-count', String(st.pools));
      setText('pool-count-unit', st.pools === 1 ? 'pool' : 'pools');
      setText('volume-count', String(st.volumes));
      setText('volume-count-unit', st.volumes === 1 ? 'volume' : 'volumes');
      renderRecovery(st);
    }
    if (data.df) {
      const r = data.df.raw;
      setText('overview-used-pct', fmtPct(r.raw_used_ratio));
      setText('overview-used', fmtBytes(r.raw_used_bytes));
      setText('overview-total', fmtBytes(r.size_bytes));
      const f = data.df.full_ratios || {};
      setBar($('overview-used-bar'), r.raw_used_ratio,
        r.raw_used_ratio >= f.full ? 'full' : r.raw_used_ratio >= f.nearfull ? 'nearfull' : '');
    }
    const cr = clusterRates();
    if (cr) {
      setText('io-reads', fmtNum(cr.reads_per_sec, 1));
      setText('io-writes', fmtNum(cr.writes_per_sec, 1));
      setText('io-read-bytes', fmtBytes(cr.read_bytes_per_sec));
      setText('io-written-bytes', fmtBytes(cr.written_bytes_per_sec));
      setText('io-over', fmtDuration(cr.over_secs) + ' to ' + new Date(cr.at_unix * 1000).toLocaleTimeString());
    } else if (data.history) {
      setText('io-over', 'needs two history samples');
    }
    if (page === 'overview') renderIoChart();
  }

  function syncList(ul, items) {
    const old = new Map(Array.from(ul.children).map((li) => [li.dataset.key, li]));
    items.forEach(([k, text], i) => {
      let li = old.get(k);
      if (li) old.delete(k);
      else { li = el('li'); li.dataset.key = k; }
      setText(li, text);
      if (ul.children[i] !== li) ul.insertBefore(li, ul.children[i] || null);
    });
    for (const li of old.values()) li.remove();
  }

  function renderOsds() {
    const st = data.status;
    const df = data.df;
    if (!st || !df) return;
    const space = new Map((df.osds || []).map((o) => [o.id, o]));
    const rates = new Map(((data.history && data.history.rates) || []).map((r) => [r.id, r]));
    const ratios = df.full_ratios || {};
    let over = null;
    syncRows($('osd-table').tBodies[0], st.osds.list, (o) => o.id, (o) => {
      const s = space.get(o.id) || {};
      const r = rates.get('osd.' + o.id);
      if (r) over = r;
      const state = (o.up ? 'up' : 'down') + ' / ' + (o.in ? 'in' : 'out') + (o.held_down ? ' (held down)' : '');
      const cls = !o.up ? 'state-down' : !o.in ? 'state-out' : 'state-up';
      const ratio = s.used_ratio || 0;
      return [
        'osd.' + o.id,
        o.host || '–',
        (o.addrs || []).join(', ') || '–',
        { text: state, cls },
        { text: String(o.weight), num: true },
        { text: fmtBytes(s.device_bytes), bytes: s.device_bytes },
        { text: fmtBytes(s.data_bytes), bytes: s.data_bytes },
        { text: fmtBytes(s.used_bytes), bytes: s.used_bytes },
        { text: fmtBytes(s.free_bytes), bytes: s.free_bytes },
        s.reported ? {
          text: fmtPct(ratio), bar: ratio,
          barCls: ratio >= ratios.full ? 'full' : ratio >= ratios.nearfull ? 'nearfull' : '',
        } : 'no report',
        s.state ? String(s.state) : 'ok',
        { text: r ? fmtNum(r.reads_per_sec, 1) : '–', num: true },
        { text: r ? fmtNum(r.writes_per_sec, 1) : '–', num: true },
        { text: r ? fmtBytes(r.read_bytes_per_sec) : '–', num: true },
        { text: r ? fmtBytes(r.written_bytes_per_sec) : '–', num: true },
      ];
    });
    for (const tr of $('osd-table').tBodies[0].rows) tr.dataset.osd = tr.dataset.key;
    setText('osd-rate-over', over ? 'over ' + fmtDuration(over.over_secs) + ' to ' +
      new Date(over.at_unix * 1000).toLocaleTimeString()
      : missing.has('history') ? 'this manager has no history endpoint' : 'needs two history samples');
    const daemons = (st.daemons || []).filter((d) => d.metrics);
    syncList($('metrics-endpoints'), daemons.map((d) => [d.kind + '.' + d.name,
      d.kind + '.' + d.name + ': ' + d.metrics + '/metrics']));
  }

  function renderPools() {
    const df = data.df;
    if (!df) return;
    const views = new Map(((data.pools) || []).map((p) => [p.id, p]));
    syncRows($('pool-table').tBodies[0], df.pools || [], (p) => p.id, (p) => {
      const v = views.get(p.id) || {};
      return [
        p.name, { text: String(p.id), num: true }, { text: String(p.size), num: true },
        { text: v.min_size != null ? String(v.min_size) : '–', num: true },
        { text: v.pgs != null ? String(v.pgs) : '–', num: true },
        { text: v.volumes != null ? String(v.volumes) : '–', num: true },
        { text: fmtBytes(p.stored_bytes), bytes: p.stored_bytes },
        { text: fmtNum(p.objects, 0), num: true },
        { text: fmtBytes(p.raw_used_bytes), bytes: p.raw_used_bytes },
        { text: fmtPct(p.used_ratio), bar: p.used_ratio },
        { text: fmtBytes(p.max_avail_bytes), bytes: p.max_avail_bytes },
        { text: fmtBytes(p.provisioned_bytes), bytes: p.provisioned_bytes },
      ];
    });
    const vols = df.volumes || [];
    syncRows($('volume-table').tBodies[0], vols, (v) => v.id, (v) => [
      v.name, { text: String(v.id), num: true }, v.pool,
      { text: fmtBytes(v.provisioned_bytes), bytes: v.provisioned_bytes },
      { text: fmtBytes(v.used_bytes), bytes: v.used_bytes },
      { text: fmtPct(v.provisioned_bytes ? v.used_bytes / v.provisioned_bytes : 0),
        bar: v.provisioned_bytes ? v.used_bytes / v.provisioned_bytes : 0 },
      { text: fmtBytes(v.raw_used_bytes), bytes: v.raw_used_bytes },
      { text: fmtNum(v.objects, 0), num: true },
      { text: fmtBytes(v.snapshot_bytes), bytes: v.snapshot_bytes },
    ]);
    $('volumes-none').hidden = vols.length > 0;
  }

  // The capacity numbers, all from `pontoon df --json`'s answer.
  function capacity(df) {
    const r = df.raw;
    const pools = df.pools || [];
    const stored = sum(pools, (p) => p.stored_bytes);
    const snapshots = sum(pools, (p) => p.snapshot_bytes);
    const poolRaw = sum(pools, (p) => p.raw_used_bytes);
    const provisioned = sum(pools, (p) => p.provisioned_bytes);
    return {
      total: r.size_bytes,
      used: r.raw_used_bytes,
      free: r.avail_bytes,
      usedRatio: r.raw_used_ratio,
      stored,
      provisioned,
      savings: Math.max(0, provisioned - stored) + sum(pools, (p) => p.compression_saved_bytes),
      parts: [
        ['volume-data', Math.max(0, stored - snapshots)],
        ['snapshots', snapshots],
        ['replica-overhead', Math.max(0, poolRaw - stored)],
        ['other-data', Math.max(0, r.used_bytes - poolRaw)],
        ['journal-metadata', Math.max(0, r.raw_used_bytes - r.used_bytes)],
        ['free', r.avail_bytes],
      ],
    };
  }

  function renderCapacity() {
    const df = data.df;
    if (df) {
      const c = capacity(df);
      setBytes('capacity-total', c.total);
      setBytes('capacity-used', c.used);
      setBytes('capacity-free', c.free);
      setBytes('capacity-savings', c.savings);
      setBytes('capacity-provisioned', c.provisioned);
      setBytes('capacity-stored', c.stored);
      setText('capacity-used-pct', fmtPct(c.usedRatio));
      const stack = $('breakdown-bar');
      c.parts.forEach(([name, bytes], i) => {
        const tr = document.querySelector('#capacity-breakdown tr[data-consumer="' + name + '"]');
        tr.dataset.bytes = String(bytes);
        setCell(tr.cells[2], { text: fmtBytes(bytes), bytes });
        setCell(tr.cells[3], { text: fmtPct(c.total ? bytes / c.total : 0), num: true });
        let seg = stack.children[i];
        if (!seg) { seg = el('div', 'c' + (i + 1)); stack.appendChild(seg); }
        seg.style.width = (c.total ? bytes / c.total * 100 : 0).toFixed(2) + '%';
        seg.title = tr.cells[1].textContent + ': ' + fmtBytes(bytes);
      });
    }
    if (page === 'capacity') renderHistoryChart();
    renderForecast();
  }

  // --------------------------------------------------------------- charts

  const charts = {};

  function clusterSeries() {
    const h = data.history;
    return h && (h.series || []).find((s) => s.id === 'cluster');
  }

  function chartWidth(box) {
    return Math.max(300, (box.clientWidth || box.parentElement.clientWidth || 900) - 18);
  }

  // Creates the chart in `box` the first time, else gives it new data.
  function plot(name, box, opts, rows) {
    if (typeof uPlot === 'undefined') {
      setText(box, 'the chart library did not load');
      return;
    }
    if (box.offsetParent === null) return; // hidden: drawn when shown
    let u = charts[name];
    if (!u) {
      opts.width = chartWidth(box);
      box.textContent = '';
      u = charts[name] = new uPlot(opts, rows, box);
    } else {
      u.setData(rows);
    }
    box.dataset.points = String(rows[0].length);
  }

  window.addEventListener('resize', () => {
    for (const [name, u] of Object.entries(charts)) {
      const box = $(name);
      if (box && box.offsetParent !== null) u.setSize({ width: chartWidth(box), height: u.height });
    }
  });

  // Time ticks: whole seconds at least (the history's points are seconds).
  const M = 60;
  const H = 3600;
  const D = 86400;
  const timeAxis = {
    incrs: [1, 2, 5, 10, 15, 30, M, 2 * M, 5 * M, 10 * M, 15 * M, 30 * M, H, 2 * H, 3 * H, 6 * H,
      12 * H, D, 2 * D, 7 * D, 14 * D, 30 * D, 91 * D, 182 * D, 365 * D],
  };

  const bytesAxis = {
    values: (u, splits) => splits.map((v) => fmtBytes(v)),
    size: 80,
  };

  function renderHistoryChart() {
    const s = clusterSeries();
    const box = $('history-chart');
    if (!s) {
      if (missing.has('history')) setText(box, 'This manager has no history endpoint.');
      return;
    }
    const v = s.values;
    const add = (a, b) => a.map((x, i) => x + b[i]);
    const rows = [
      s.t,
      v.stored_bytes,
      v.used_bytes,
      v.raw_used_bytes,
      add(v.used_bytes, v.nearfull_room_bytes),
      add(v.used_bytes, v.full_room_bytes),
      v.size_bytes,
    ];
    plot('history-chart', box, {
      height: 300,
      legend: { live: false },
      scales: { y: { range: (u, min, max) => [0, Math.max(1, max) * 1.05] } },
      axes: [timeAxis, bytesAxis],
      series: [
        {},
        { label: 'stored (one copy)', stroke: '#8250df', width: 2, value: (u, x) => fmtBytes(x) },
        { label: 'data (every copy)', stroke: '#1f6feb', fill: 'rgba(31,111,235,0.10)', width: 2, value: (u, x) => fmtBytes(x) },
        { label: 'raw used (+ journals, metadata)', stroke: '#57606a', width: 1.5, value: (u, x) => fmtBytes(x) },
        { label: 'nearfull at', stroke: '#b7791f', dash: [6, 4], width: 1.5, value: (u, x) => fmtBytes(x) },
        { label: 'full at', stroke: '#cf222e', dash: [6, 4], width: 1.5, value: (u, x) => fmtBytes(x) },
        { label: 'total', stroke: '#8c959f', dash: [2, 3], width: 1, value: (u, x) => fmtBytes(x) },
      ],
    }, rows);
    setText('history-note', s.t.length + ' points from ' + (s.t.length ? new Date(s.t[0] * 1000).toLocaleString() : '–') +
      (data.history.interval_secs ? ', sampled every ' + fmtDuration(data.history.interval_secs) : '') +
      ' (pontoon df --history). "nearfull at" and "full at": the data level at which the first OSD reaches that ratio.');
  }

  // Per-second rates of a counter column between successive points.
  function perSec(t, col) {
    const out = [null];
    for (let i = 1; i < t.length; i++) {
      const dt = t[i] - t[i - 1];
      const d = col[i] >= col[i - 1] ? col[i] - col[i - 1] : col[i];
      out.push(dt > 0 ? d / dt : null);
    }
    return out;
  }

  function renderIoChart() {
    const s = clusterSeries();
    if (!s) return;
    const v = s.values;
    const rows = [s.t, perSec(s.t, v.reads_total), perSec(s.t, v.writes_total)];
    plot('io-chart', $('io-chart'), {
      height: 180,
      legend: { live: false },
      axes: [timeAxis, { size: 60 }],
      series: [
        {},
        { label: 'reads/s', stroke: '#1a7f37', width: 1.5, value: (u, x) => fmtNum(x, 1) },
        { label: 'writes/s', stroke: '#1f6feb', width: 1.5, value: (u, x) => fmtNum(x, 1) },
      ],
    }, rows);
  }

  function showEta(id, eta, noHistory) {
    const e = $(id);
    const range = $(id.replace('days', 'range'));
    if (noHistory) {
      e.dataset.state = 'no-history';
      e.dataset.days = '';
      setText(e, 'not enough history');
      setText(range, noHistory);
    } else if (!eta.filling || eta.days == null) {
      e.dataset.state = 'not-filling';
      e.dataset.days = '';
      setText(e, 'not filling');
      setText(range, 'usage is not growing over the window');
    } else {
      e.dataset.state = 'filling';
      e.dataset.days = String(eta.days);
      setText(e, fmtDays(eta.days));
      setText(range, '80% range: ' + fmtDays(eta.earliest_days) + ' to ' +
        (eta.latest_days == null ? 'never' : fmtDays(eta.latest_days)));
    }
  }

  function etaText(eta) {
    if (!eta.filling || eta.days == null) return 'not filling';
    return fmtDays(eta.days) + ' (' + fmtDays(eta.earliest_days) + '–' +
      (eta.latest_days == null ? 'never' : fmtDays(eta.latest_days)) + ')';
  }

  function renderForecast() {
    const h = data.history;
    if (!h) {
      if (missing.has('history')) {
        for (const id of ['forecast-days-full', 'forecast-days-nearfull']) {
          $(id).dataset.state = 'unavailable';
          setText(id, 'unavailable');
        }
      }
      return;
    }
    const f = h.forecast;
    const s = clusterSeries();
    const n = s ? s.t.length : 0;
    const c = f.cluster;
    const none = c ? null : 'needs at least 5 samples of the capacity history (' + n + ' so far)';
    showEta('forecast-days-nearfull', c && c.until_nearfull, none);
    showEta('forecast-days-full', c && c.until_full, none);
    const rate = $('forecast-rate');
    if (c) {
      const t = c.trend;
      rate.dataset.bytesPerDay = String(t.rate_per_day);
      setText(rate, fmtBytes(t.rate_per_day) + '/day');
      setText('forecast-rate-range', '80% range ' + fmtBytes(t.rate_low_per_day) + ' to ' +
        fmtBytes(t.rate_high_per_day) + ' per day, over ' + fmtDays(t.span_days) +
        (t.one_off_jumps ? ', ' + t.one_off_jumps + ' one-off jumps set aside' : ''));
    } else {
      rate.dataset.bytesPerDay = '';
      setText(rate, '–');
      setText('forecast-rate-range', '');
    }
    const names = new Map(((data.df && data.df.pools) || []).map((p) => [p.id, p.name]));
    syncRows($('forecast-pools').tBodies[0], f.pools || [], (p) => p.id, (p) => [
      names.get(p.id) || 'pool ' + p.id,
      { text: fmtBytes(p.stored_bytes), bytes: p.stored_bytes },
      { text: fmtBytes(p.max_avail_bytes), bytes: p.max_avail_bytes },
      { text: p.growth ? fmtBytes(p.growth.rate_per_day) : 'not enough history', num: true },
      etaText(p.until_nearfull),
      etaText(p.until_full),
    ]);
    setText('forecast-method', 'Method: ' + f.method + '. Cluster raw data against the room before the first OSD reaches the ratio.');
  }

  function renderEndurance() {
    const e = data.endurance;
    if (!e) {
      if (missing.has('endurance')) setText('endurance-note', 'This manager has no endurance endpoint.');
      return;
    }
    const osds = Array.isArray(e) ? e : e.osds || [];
    syncRows($('endurance-table').tBodies[0], osds, (o) => o.osd, (o) => {
      const r = o.rated;
      const kind = o.nvme && o.nvme.percentage_used != null
        ? o.device_kind + ' (' + o.nvme.percentage_used + '% used)' : o.device_kind;
      return [
        'osd.' + o.osd,
        { text: fmtBytes(o.device_bytes), bytes: o.device_bytes },
        kind,
        { text: fmtDuration(o.days * 86400) + (o.basis === 'history' ? '' : ' since start'), title: o.basis },
        { text: fmtBytes(o.user_written_bytes), bytes: o.user_written_bytes },
        { text: fmtBytes(o.device_written_bytes), bytes: o.device_written_bytes },
        { text: o.write_amplification == null ? '–' : o.write_amplification.toFixed(2) + '×', num: true },
        { text: o.device_written_per_day == null ? '–' : fmtBytes(o.device_written_per_day), num: true },
        { text: o.dwpd == null ? '–' : fmtNum(o.dwpd, o.dwpd >= 100 ? 0 : o.dwpd >= 1 ? 2 : 4), num: true },
        { text: r ? fmtNum(r.rated_dwpd, 2) : 'not set', num: true },
        r ? { text: fmtPct(r.used_fraction), bar: r.used_fraction,
          title: fmtBytes(r.written_bytes) + ' of ' + fmtBytes(r.rated_bytes) + ' (' + r.written_basis + ')' } : '–',
        r ? (r.wearout_unix != null ? fmtDate(r.wearout_unix) + ' (in ' + fmtDays(r.years_left * 365.25) + ')'
          : r.years_left == null ? 'nothing written' : '> 10,000 years') : 'no rating',
      ];
    });
    syncRows($('journal-table').tBodies[0], osds, (o) => o.osd, (o) => {
      const w = o.write_buffer;
      return [
        'osd.' + o.osd,
        w.separate_device ? 'yes' : 'no (on the data device)',
        { text: fmtBytes(w.ring_bytes), bytes: w.ring_bytes },
        { text: fmtBytes(w.written_bytes), bytes: w.written_bytes },
        { text: fmtPct(w.share_of_device_writes), num: true },
        { text: w.dwpd_if_own_device == null ? '–' : fmtNum(w.dwpd_if_own_device, 2), num: true },
      ];
    });
  }

  // ------------------------------------------------------------ start

  function start() {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('login-token').value.trim();
      if (!t) return;
      sessionStorage.setItem(TOKEN_KEY, t);
      $('login-token').value = '';
      hideLogin();
      poll();
    });
    $('logout').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin('');
    });
    window.addEventListener('hashchange', () => showPage(takeHash()));
    showPage(takeHash());
    if (!sessionStorage.getItem(TOKEN_KEY)) showLogin('');
    poll();
    setInterval(poll, POLL_MS);
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
