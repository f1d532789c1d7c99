// The playground (one prompt to several models through the proxy), prompt templates with
// versions and labels, and experiments with their results.
import { h } from '../dom.js';
import { del, get, post, put } from '../api.js';
import { announce, btn, danger, dl, errorBox, fmt, form, loaded, note, page, pager, pre, section, table } from '../widgets.js';
import { barChart } from '../charts.js';

export function playground() {
  const out = h('div', { 'aria-live': 'polite' });
  return loaded(() => get('/teams', { limit: 200 }), (teams) => page(
    'Playground',
    note('Each model’s call goes through the proxy like any request (policies, limits, budgets, routing, audit log), marked as the playground’s.'),
    section('Compare models', form({
      label: 'Compare models',
      submit: 'Compare',
      fields: [
        { name: 'models', label: 'Models (2 to 8, comma-separated)', type: 'list', required: true, placeholder: 'gpt-4o-mini, claude-3-5-haiku' },
        { name: 'system', label: 'System message', type: 'textarea', rows: 2 },
        { name: 'user', label: 'User message', type: 'textarea', rows: 4, help: 'Or use a template below.' },
        { name: 'prompt.id', label: 'Prompt template id' },
        { name: 'prompt.version', label: 'Template version or label' },
        { name: 'prompt.variables', label: 'Template variables (JSON object)', type: 'json', rows: 3 },
        { name: 'team_id', label: 'Team (budget and limits)', type: 'select', options: [['', 'None'], ...teams.data.map((t) => [t.id, t.name])] },
        { name: 'temperature', label: 'Temperature', type: 'number', step: '0.1', min: 0, max: 2 },
        { name: 'max_tokens', label: 'Max tokens', type: 'number', min: 1 },
      ],
      onSubmit: (v) => {
        const body = { models: v.models || [] };
        const messages = [];
        if (v.system) messages.push({ role: 'system', content: v.system });
        if (v.user) messages.push({ role: 'user', content: v.user });
        if (messages.length) body.messages = messages;
        if (v['prompt.id']) {
          body.prompt = { id: v['prompt.id'] };
          if (v['prompt.version']) body.prompt.version = v['prompt.version'];
          if (v['prompt.variables']) body.prompt.variables = v['prompt.variables'];
        }
        if (v.team_id) body.team_id = v.team_id;
        const parameters = {};
        if (v.temperature !== undefined) parameters.temperature = v.temperature;
        if (v.max_tokens !== undefined) parameters.max_tokens = v.max_tokens;
        if (Object.keys(parameters).length) body.parameters = parameters;
        out.replaceChildren(h('p', { class: 'muted' }, 'Asking the models…'));
        return post('/playground/compare', body).catch((e) => {
          out.replaceChildren();
          throw e;
        });
      },
      onDone: (r) => {
        out.replaceChildren(results(r.results));
        announce('Comparison done.');
      },
    })),
    out,
  ));
}

function results(rows) {
  return section('Results', barChart({ title: 'Total latency by model', data: rows.map((r) => ({ label: r.model, value: r.latency_ms || 0 })), format: fmt.ms }),
    h('div', { class: 'compare' }, rows.map((r) => h('article', { class: 'card result', 'aria-label': `Answer of ${r.model}` },
      h('h3', {}, r.model),
      dl([
        ['Answered by', r.provider ? `${r.provider} / ${r.upstream_model || ''}` : null], ['Status', String(r.status)],
        ['Time to first token', fmt.ms(r.ttft_ms)], ['Total', fmt.ms(r.latency_ms)],
        ['Tokens', `${r.prompt_tokens ?? 0} prompt, ${r.completion_tokens ?? 0} completion, ${r.cached_tokens ?? 0} cached, ${r.reasoning_tokens ?? 0} reasoning`],
        ['Cost', fmt.money(r.cost_usd)], ['Request', r.request_id ? h('a', { href: `#/logs/${r.request_id}` }, r.request_id) : null],
      ]),
      r.error ? errorBox(new Error(`${r.error.status} ${r.error.code || r.error.type}: ${r.error.message}`)) : pre(r.answer || ''),
    ))));
}

const EXAMPLE_MESSAGES = [{ role: 'system', content: 'You are a concise assistant.' }, { role: 'user', content: 'Summarize: {{ text }}' }];
const EXAMPLE_VARIABLES = { text: { type: 'string', required: true } };

export function templates() {
  const list = pager({
    caption: 'Prompt templates',
    load: (cursor) => get('/prompt-templates', { cursor }),
    columns: [
      { label: 'Name', value: (t) => h('a', { href: `#/templates/${t.id}` }, t.name) },
      { label: 'Latest version', value: (t) => String(t.latest_version) },
      { label: 'Labels', value: (t) => Object.entries(t.labels || {}).map(([l, v]) => `${l} → v${v}`).join(', ') },
      { label: 'Updated', value: (t) => fmt.time(t.updated_at) },
    ],
  });
  return page('Prompt templates', section('Templates', list), section('Create a template', form({
    label: 'Create template',
    submit: 'Create template',
    fields: [
      { name: 'name', label: 'Name', required: true },
      { name: 'description', label: 'Description' },
      { name: 'messages', label: 'Messages (JSON; variables as {{ name }})', type: 'json', rows: 8, value: EXAMPLE_MESSAGES, required: true },
      { name: 'variables', label: 'Variables (JSON: name → {type, required, default})', type: 'json', rows: 4, value: EXAMPLE_VARIABLES },
      { name: 'message', label: 'Note on this version' },
    ],
    onSubmit: (v) => post('/prompt-templates', v),
    onDone: (t) => {
      announce(`Template ${t.name} created.`);
      list.reload();
    },
  })));
}

export function template({ id, go }) {
  return loaded(() => get(`/prompt-templates/${id}`), (t, reload) => {
    const shown = h('div');
    const versions = pager({
      caption: 'Versions, newest first',
      load: (cursor) => get(`/prompt-templates/${id}/versions`, { cursor }),
      columns: [
        { label: 'Version', value: (v) => String(v.version) },
        { label: 'Note', value: (v) => v.message },
        { label: 'Hash', value: (v) => h('code', {}, v.content_hash.slice(0, 12)) },
        { label: 'When', value: (v) => fmt.time(v.created_at) },
        { label: '', value: (v) => btn(`Show v${v.version}`, () => shown.replaceChildren(section(`Version ${v.version}`, pre({ messages: v.messages, variables: v.variables })))) },
      ],
    });
    const latest = t.latest || {};
    return page(
      `Template ${t.name}`,
      dl([['Id', h('code', {}, t.id)], ['Latest version', String(t.latest_version)], ['Labels', Object.entries(t.labels || {}).map(([l, v]) => `${l} → v${v}`).join(', ')], ['Description', t.description]]),
      section('Versions', versions, shown),
      section('New version', form({
        label: 'New version',
        submit: 'Save as new version',
        fields: [
          { name: 'messages', label: 'Messages (JSON)', type: 'json', rows: 8, value: latest.messages || EXAMPLE_MESSAGES, required: true },
          { name: 'variables', label: 'Variables (JSON)', type: 'json', rows: 4, value: latest.variables || {} },
          { name: 'message', label: 'Note on this version' },
        ],
        onSubmit: (v) => post(`/prompt-templates/${id}/versions`, v),
        onDone: (v) => {
          announce(`Version ${v.version} saved.`);
          reload();
        },
      })),
      section('Labels', form({
        label: 'Set label',
        inline: true,
        submit: 'Set label',
        fields: [
          { name: 'label', label: 'Label', required: true, placeholder: 'production' },
          { name: 'version', label: 'Version', type: 'number', min: 1, required: true, value: t.latest_version },
        ],
        onSubmit: (v) => put(`/prompt-templates/${id}/labels/${encodeURIComponent(v.label || '')}`, { version: v.version }),
        onDone: () => reload(),
      }), h('ul', { class: 'plain' }, Object.keys(t.labels || {}).map((l) => h('li', {}, `${l} `, danger(`Remove label ${l}`, async () => { await del(`/prompt-templates/${id}/labels/${encodeURIComponent(l)}`); reload(); }))))),
      section('Preview', (() => {
        const out = h('div');
        return [form({
          label: 'Render template',
          submit: 'Render',
          fields: [
            { name: 'version', label: 'Version (empty: latest)', type: 'number', min: 1 },
            { name: 'variables', label: 'Variables (JSON object)', type: 'json', rows: 3, value: {} },
          ],
          onSubmit: (v) => post(`/prompt-templates/${id}/render`, v),
          onDone: (r) => out.replaceChildren(pre(r.messages)),
        }), out];
      })()),
      section('Delete', h('p', {}, 'A soft delete: its versions stay readable for the audit log.'), danger('Delete template', async () => { await del(`/prompt-templates/${id}`); go('templates'); })),
    );
  });
}

export function experiments() {
  const list = pager({
    caption: 'Experiments',
    load: (cursor) => get('/experiments', { cursor }),
    columns: [
      { label: 'Name', value: (x) => h('a', { href: `#/experiments/${x.id}` }, x.name) },
      { label: 'Status', value: (x) => x.status },
      { label: 'Metric', value: (x) => x.metric },
      { label: 'Variants', value: (x) => x.variants.map((v) => v.name).join(', ') },
      { label: 'Winner', value: (x) => x.winner },
    ],
  });
  return loaded(() => get('/teams', { limit: 200 }), (teams) => page('Experiments', section('Experiments', list), section('Create an experiment', form({
    label: 'Create experiment',
    submit: 'Create experiment',
    fields: [
      { name: 'name', label: 'Name', required: true },
      { name: 'metric', label: 'Metric', type: 'select', options: [['latency', 'latency (lower wins)'], ['cost', 'cost (lower wins)'], ['error_rate', 'error rate (lower wins)'], ['feedback', 'feedback (higher wins)']] },
      { name: 'traffic.model', label: 'Traffic: requests for this model' },
      { name: 'traffic.template_id', label: 'Traffic: requests rendering this template' },
      { name: 'traffic.team_id', label: 'Traffic: only this team', type: 'select', options: [['', 'Every team'], ...teams.data.map((t) => [t.id, t.name])] },
      { name: 'variants', label: 'Variants (JSON; the first is the control)', type: 'json', rows: 6, required: true,
        value: [{ name: 'control', model: 'gpt-4o-mini', weight: 50 }, { name: 'candidate', model: 'gpt-4o', weight: 50 }] },
      { name: 'max_samples_per_variant', label: 'Samples per variant at most', type: 'number', min: 30 },
    ],
    onSubmit: (v) => {
      const traffic = {};
      for (const k of ['model', 'template_id', 'team_id']) if (v[`traffic.${k}`]) traffic[k] = v[`traffic.${k}`];
      const body = { name: v.name, metric: v.metric, traffic, variants: v.variants };
      if (v.max_samples_per_variant !== undefined) body.max_samples_per_variant = v.max_samples_per_variant;
      return post('/experiments', body);
    },
    onDone: (x) => {
      announce(`Experiment ${x.name} created.`);
      list.reload();
    },
  }))));
}

export function experiment({ id }) {
  return loaded(() => Promise.all([get(`/experiments/${id}`), get(`/experiments/${id}/results`)]), ([x, r], reload) => {
    const act = (verb) => btn(verb[0].toUpperCase() + verb.slice(1), async () => {
      try {
        await post(`/experiments/${id}/${verb}`);
        announce(`Experiment ${verb}: done.`);
        reload();
      } catch (e) {
        announce(e.message);
      }
    });
    return page(
      `Experiment ${x.name}`,
      dl([['Status', x.status], ['Metric', x.metric], ['Started', fmt.time(x.started_at)], ['Ended', fmt.time(x.ended_at)], ['Winner', x.winner], ['Why it ended', x.completion_reason],
        ['Test', `${r.test}, α = ${r.alpha} overall (${r.alpha_per_comparison} per comparison)`], ['Samples a variant needs to win', String(r.min_samples)]]),
      h('div', { class: 'row' }, x.status === 'running' ? act('pause') : null, x.status === 'draft' || x.status === 'paused' ? act('start') : null,
        x.status === 'running' || x.status === 'paused' ? act('stop') : null),
      section('Results', barChart({ title: `Mean ${r.metric} by variant`, data: r.variants.map((v) => ({ label: v.name, value: v.mean || 0 })), format: (n) => Number(n).toFixed(4) }),
        table({
          caption: 'Variants',
          columns: [
            { label: 'Variant', value: (v) => `${v.name}${v.control ? ' (control)' : ''}` },
            { label: 'Samples', value: (v) => fmt.num(v.samples) },
            { label: 'Mean', value: (v) => Number(v.mean).toFixed(4) },
            { label: 'Interval', value: (v) => (v.interval || []).map((n) => Number(n).toFixed(4)).join(' to ') },
            { label: 'Against control', value: (v) => (v.comparison ? `${v.comparison.verdict} (p = ${Number(v.comparison.p_value).toFixed(4)})` : null) },
          ],
          rows: r.variants,
        })),
    );
  });
}


