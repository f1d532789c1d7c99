// Analytics (charts over time and by group), the request log with its detail, policy analytics
// with exports, and spend reconciliation runs.
import { h } from '../dom.js';
import { api, get, post, query } from '../api.js';
import { announce, btn, dl, download, errorBox, fmt, form, loaded, note, page, pager, pre, section, table } from '../widgets.js';
import { barChart, lineChart } from '../charts.js';

const PERIODS = [['7d', 'Last 7 days'], ['24h', 'Last 24 hours'], ['month', 'This month'], ['week', 'This week'], ['day', 'Today']];
const GROUPS = [['team', 'Team'], ['model', 'Model'], ['key', 'API key'], ['provider', 'Provider']];

/** An RFC 3339 time as a `datetime-local` field's value (UTC, to the minute). */
function local(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : d.toISOString().slice(0, 16);
}

export function overview({ params, go }) {
  const period = params.get('period') || '7d';
  const by = params.get('group_by') || 'model';
  const teamId = params.get('team_id') || '';
  const base = { period, team_id: teamId || undefined };
  const charts = loaded(() => Promise.all([get('/analytics/overview', { ...base, group_by: 'day' }), get('/analytics/overview', { ...base, group_by: by })]),
    ([days, groups]) => {
      const d = days.groups || [];
      const at = (f) => d.map((g) => ({ label: g.key, value: f(g) }));
      const named = (groups.groups || []).map((g) => ({ ...g, label: g.name || g.key || 'none' }));
      return [
        section('Totals', dl([
          ['Requests', fmt.num(days.requests)], ['Errors', `${fmt.num(days.errors)} (${fmt.pct(days.error_rate)})`],
          ['Spend', fmt.money(days.spend_usd)], ['Tokens', fmt.num(days.total_tokens)],
          ['Cache hit rate', fmt.pct(days.cache ? days.cache.hit_rate : 0)],
          ['Latency p50 / p95', `${fmt.ms(days.latency.p50_ms)} / ${fmt.ms(days.latency.p95_ms)}`],
        ])),
        h('div', { class: 'charts' },
          lineChart({ title: 'Spend per day (USD)', series: [{ name: 'spend', points: at((g) => Number(g.spend_usd)) }], format: fmt.usd }),
          lineChart({ title: 'Requests and errors per day', series: [{ name: 'requests', points: at((g) => g.requests) }, { name: 'errors', points: at((g) => g.errors) }], format: fmt.num }),
          lineChart({ title: 'Cache hit rate per day', series: [{ name: 'hit rate', points: at((g) => (g.cache ? g.cache.hit_rate : 0)) }], format: fmt.pct }),
          lineChart({ title: 'Latency per day (p50, p95)', series: [{ name: 'p50', points: at((g) => g.latency.p50_ms || 0) }, { name: 'p95', points: at((g) => g.latency.p95_ms || 0) }], format: fmt.ms }),
          barChart({ title: `Spend by ${by} (USD)`, data: named.map((g) => ({ label: g.label, value: Number(g.spend_usd) })), format: fmt.usd }),
          barChart({ title: `Requests by ${by}`, data: named.map((g) => ({ label: g.label, value: g.requests })), format: fmt.num }),
        ),
      ];
    });
  return loaded(() => get('/teams', { limit: 200 }), (teams) => page(
    'Analytics',
    section('Show', form({
      label: 'Analytics period',
      inline: true,
      submit: 'Show',
      fields: [
        { name: 'period', label: 'Period', type: 'select', options: PERIODS, value: period },
        { name: 'group_by', label: 'Group by', type: 'select', options: GROUPS, value: by },
        { name: 'team_id', label: 'Team', type: 'select', options: [['', 'All teams'], ...teams.data.map((t) => [t.id, t.name])], value: teamId },
      ],
      onSubmit: async (v) => go(`overview${query(v)}`),
    })),
    charts,
  ));
}

export function logs({ params, go }) {
  const filters = Object.fromEntries(params.entries());
  const list = pager({
    caption: 'Requests, newest first',
    load: (cursor) => get('/analytics/logs', { ...filters, cursor }),
    columns: [
      { label: 'When', value: (e) => h('a', { href: `#/logs/${e.id}` }, fmt.time(e.created_at)) },
      { label: 'Model', value: (e) => e.model },
      { label: 'Status', value: (e) => String(e.status) },
      { label: 'Cost', value: (e) => fmt.money(e.cost_usd) },
      { label: 'Tokens', value: (e) => fmt.num(e.tokens.total) },
      { label: 'Latency', value: (e) => fmt.ms(e.latency.total_ms) },
      { label: 'Cache', value: (e) => e.cache },
      { label: 'Policy', value: (e) => e.policy_action },
      { label: 'Key', value: (e) => (e.key_prefix ? h('code', {}, e.key_prefix) : null) },
    ],
    empty: 'No requests match.',
  });
  return page(
    'Request log',
    section('Filter', form({
      label: 'Filter requests',
      inline: true,
      submit: 'Filter',
      fields: [
        { name: 'model', label: 'Model', value: filters.model },
        { name: 'status', label: 'Status', type: 'select', options: [['', 'Any'], 'success', 'error', '4xx', '429'], value: filters.status },
        { name: 'cache', label: 'Cache', type: 'select', options: [['', 'Any'], 'hit', 'miss', 'bypass', 'L1', 'L2', 'L3'], value: filters.cache },
        { name: 'policy_action', label: 'Policy action', type: 'select', options: [['', 'Any'], 'flagged', 'redacted', 'blocked', 'none'], value: filters.policy_action },
        { name: 'from', label: 'From (UTC)', type: 'datetime', value: local(filters.from) },
        { name: 'to', label: 'To (UTC)', type: 'datetime', value: local(filters.to) },
      ],
      onSubmit: async (v) => go(`logs${query(v)}`),
    })),
    section('Requests', list),
  );
}

export function logEntry({ id }) {
  return loaded(() => get(`/analytics/logs/${id}`), (e) => page(
    `Request ${e.id}`,
    section('Request', dl([
      ['When', fmt.time(e.created_at)], ['Endpoint', e.endpoint], ['Status', String(e.status)], ['Error', e.error_type],
      ['Model asked', e.model], ['Answered by', e.provider ? `${e.provider} / ${e.upstream_model || ''}` : null],
      ['Cost', fmt.money(e.cost_usd)], ['Settled by', e.settled_by], ['Cache', e.cache], ['Saved by the cache', fmt.money(e.cache_saved_usd)],
      ['Tokens', `${e.tokens.prompt} prompt, ${e.tokens.completion} completion, ${e.tokens.cached} cached, ${e.tokens.reasoning} reasoning`],
      ['Latency', `${fmt.ms(e.latency.total_ms)} total, ${fmt.ms(e.latency.ttft_ms)} to first token, ${e.latency.overhead_us ?? '—'} µs gateway overhead`],
      ['Key', e.key_prefix], ['Team', e.team_id ? h('a', { href: `#/teams/${e.team_id}` }, e.team_id) : null],
      ['Policy action', e.policy_action], ['Client', e.client_ip], ['User agent', e.user_agent], ['Origin', e.origin],
      ['Template', e.template ? `${e.template.id} v${e.template.version}` : null],
      ['Experiment', e.experiment ? `${e.experiment.id} (${e.experiment.variant})` : null],
    ])),
    section('Routing attempts', table({
      caption: 'Upstream attempts, in order',
      columns: [
        { label: '#', value: (a) => String(e.routing.indexOf(a) + 1) },
        { label: 'Provider', value: (a) => a.provider },
        { label: 'Model', value: (a) => a.model },
        { label: 'Region', value: (a) => a.region },
        { label: 'Credential', value: (a) => a.credential },
        { label: 'Outcome', value: (a) => a.outcome },
        { label: 'Status', value: (a) => (a.status === null ? null : String(a.status)) },
        { label: 'Latency', value: (a) => fmt.ms(a.latency_ms) },
        { label: 'Error', value: (a) => a.error },
      ],
      rows: e.routing,
      empty: 'No upstream attempt (answered by the cache or refused before routing).',
    })),
    section('Policy decisions', table({
      caption: 'Guardrail decisions',
      columns: [
        { label: 'Policy', value: (d) => d.policy },
        { label: 'Guardrail', value: (d) => d.guardrail },
        { label: 'Action', value: (d) => d.action },
        { label: 'Stage', value: (d) => d.stage },
        { label: 'Entities', value: (d) => Object.entries(d.entities || {}).map(([k, n]) => `${k} × ${n}`).join(', ') },
        { label: 'Reason', value: (d) => d.reason },
      ],
      rows: e.policy,
      empty: 'No guardrail acted on this request.',
    })),
    section('Audit chain link', dl([['Sequence', e.chain.seq === null ? null : String(e.chain.seq)], ['Previous hash', e.chain.prev_hash ? h('code', { class: 'wrap' }, e.chain.prev_hash) : null], ['Row hash', e.chain.row_hash ? h('code', { class: 'wrap' }, e.chain.row_hash) : null]])),
    e.request_body || e.response_body ? section('Bodies (after redaction)', h('h3', {}, 'Request'), pre(e.request_body || ''), h('h3', {}, 'Response'), pre(e.response_body || '')) : null,
    h('p', {}, h('a', { href: '#/logs' }, 'Back to the log')),
  ));
}

export function policyAnalytics({ params, go }) {
  const filters = Object.fromEntries(params.entries());
  const exportAs = (format) => btn(`Export ${format.toUpperCase()}`, async () => {
    try {
      const res = await api('GET', `/analytics/policy/export${query({ ...filters, format })}`, undefined, { raw: true, accept: '*/*' });
      await download(res, `policy.${format}`);
      announce('Export downloaded.');
    } catch (e) {
      announce(e.message);
    }
  });
  return page(
    'Policy analytics',
    section('Filter', form({
      label: 'Filter policy analytics',
      inline: true,
      submit: 'Filter',
      fields: [
        { name: 'policy', label: 'Policy', value: filters.policy },
        { name: 'action', label: 'Action', type: 'select', options: [['', 'Any'], 'flagged', 'redacted', 'blocked'], value: filters.action },
        { name: 'guardrail', label: 'Guardrail', value: filters.guardrail },
        { name: 'from', label: 'From (UTC)', type: 'datetime', value: local(filters.from) },
        { name: 'to', label: 'To (UTC)', type: 'datetime', value: local(filters.to) },
      ],
      onSubmit: async (v) => go(`policy-analytics${query(v)}`),
    })),
    loaded(() => get('/analytics/policy', filters), (p) => [
      section('Decisions', dl([['Period', `${fmt.time(p.from)} to ${fmt.time(p.to)}`], ['Requests acted on', fmt.num(p.total.requests)], ['Decisions', fmt.num(p.total.decisions)]]),
        p.data.length ? barChart({ title: 'Hits by policy and action', data: p.data.slice(0, 12).map((r) => ({ label: `${r.policy} ${r.action}`, value: r.hits })), format: fmt.num }) : null,
        table({
          caption: 'Policy hits',
          columns: [
            { label: 'Policy', value: (r) => r.policy },
            { label: 'Guardrail', value: (r) => r.guardrail },
            { label: 'Action', value: (r) => r.action },
            { label: 'Team', value: (r) => r.team_id },
            { label: 'Hits', value: (r) => fmt.num(r.hits) },
            { label: 'Requests', value: (r) => fmt.num(r.requests) },
            { label: '', value: (r) => h('a', { href: `#/logs${query({ policy_action: r.action })}` }, 'Requests') },
          ],
          rows: p.data,
          empty: 'No guardrail acted in this period.',
        })),
    ]),
    section('Export', h('div', { class: 'row' }, exportAs('jsonl'), exportAs('csv'))),
  );
}

export function reconciliation() {
  const result = h('div');
  const runs = pager({
    caption: 'Reconciliation runs',
    load: (cursor) => get('/analytics/reconcile', { cursor }),
    columns: [
      { label: 'When', value: (r) => fmt.time(r.created_at) },
      { label: 'Provider', value: (r) => r.provider },
      { label: 'Days', value: (r) => `${r.from} up to ${r.to} (exclusive)` },
      { label: 'Matched', value: (r) => (r.matched ? 'yes' : 'no') },
      { label: 'Differences', value: (r) => String(r.discrepancy_count) },
      { label: '', value: (r) => btn('Details', async () => {
        try {
          result.replaceChildren(runDetail(await get(`/analytics/reconcile/${r.id}`)));
        } catch (e) {
          result.replaceChildren(errorBox(e));
        }
      }, { aria: `Details of the run of ${fmt.time(r.created_at)}` }) },
    ],
    empty: 'No run yet.',
  });
  return page(
    'Reconciliation',
    note('Compares what gw logged with the provider’s own usage report, day by day.'),
    section('Run', form({
      label: 'Run reconciliation',
      submit: 'Reconcile',
      fields: [
        { name: 'provider', label: 'Provider (its name in the route catalog)', required: true, placeholder: 'openai' },
        { name: 'from', label: 'First day', type: 'date', required: true },
        { name: 'to', label: 'Day after the last', type: 'date' },
        { name: 'admin_key', label: 'Provider admin key (else the configured one)', type: 'password', autocomplete: 'off' },
      ],
      onSubmit: (v) => post('/analytics/reconcile', v),
      onDone: (run) => {
        result.replaceChildren(runDetail(run));
        runs.reload();
      },
    })),
    result,
    section('Runs', runs),
  );
}

function runDetail(run) {
  return section(`Run of ${fmt.time(run.created_at)}`,
    dl([['Provider', run.provider], ['Days', `${run.from} up to ${run.to} (exclusive)`], ['Matched', run.matched ? 'yes' : 'no'], ['Differences', String((run.discrepancies || []).length)]]),
    h('h3', {}, 'Differences'), pre(run.discrepancies || []),
    h('h3', {}, 'Logged by gw'), pre(run.logged || []),
    h('h3', {}, 'Reported by the provider'), pre(run.reported || []));
}
