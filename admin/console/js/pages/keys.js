// Virtual API keys (secret shown once, copy, filters, restrictions, regenerate, revoke) and
// provider keys (add, rotate, test, revoke; only the hint is ever shown).
import { h } from '../dom.js';
import { del, get, patch, post } from '../api.js';
import { announce, btn, danger, dl, fmt, form, loaded, note, page, pager, section, secretBox } from '../widgets.js';
import { limitFields, limitsOf, spendMeter } from './org.js';

function teamOptions(teams) {
  return [['', 'No team'], ...teams.map((t) => [t.id, t.name])];
}

export function apiKeys() {
  let filters = {};
  const shown = h('div');
  const list = pager({
    caption: 'API keys',
    load: (cursor) => get('/api-keys', { ...filters, cursor }),
    columns: [
      { label: 'Name', value: (k) => h('a', { href: `#/keys/${k.id}` }, k.name) },
      { label: 'Prefix', value: (k) => h('code', {}, k.key_prefix) },
      { label: 'Status', value: (k) => k.status },
      { label: 'Spend', value: (k) => spendMeter(k.spend, k.budget) },
      { label: 'Models', value: (k) => (k.models && k.models.length ? k.models.join(', ') : 'all') },
      { label: 'Last used', value: (k) => fmt.time(k.last_used_at) },
      { label: '', value: (k) => (k.status === 'revoked' ? null : danger('Revoke', async () => { await del(`/api-keys/${k.id}`); announce(`Key ${k.name} revoked.`); list.reload(); }, `Revoke key ${k.name}`)) },
    ],
  });
  return loaded(() => get('/teams', { limit: 200 }), (teams) => page(
    'API keys',
    section('Create a key', shown, form({
      label: 'Create API key',
      submit: 'Create key',
      fields: [
        { name: 'name', label: 'Name', required: true },
        { name: 'team_id', label: 'Team', type: 'select', options: teamOptions(teams.data) },
        { name: 'models', label: 'Allowed models (comma-separated; empty: the team’s)', type: 'list' },
        { name: 'expires_at', label: 'Expires', type: 'datetime' },
        ...limitFields(),
      ],
      onSubmit: (v) => {
        const body = { name: v.name, ...limitsOf(v) };
        if (v.team_id) body.team_id = v.team_id;
        if (v.models) body.models = v.models;
        if (v.expires_at) body.expires_at = v.expires_at;
        if (!body.budget) delete body.budget;
        if (!body.rate_limits) delete body.rate_limits;
        return post('/api-keys', body);
      },
      onDone: (k, el) => {
        el.reset();
        shown.replaceChildren(secretBox(`Secret of key ${k.name}`, k.key, k.warning));
        announce(`Key ${k.name} created: copy its secret now.`);
        list.reload();
      },
    })),
    section('Filter', form({
      label: 'Filter keys',
      inline: true,
      submit: 'Filter',
      fields: [
        { name: 'name', label: 'Name contains' },
        { name: 'team_id', label: 'Team', type: 'select', options: [['', 'Any team'], ...teams.data.map((t) => [t.id, t.name])] },
        { name: 'status', label: 'Status', type: 'select', options: [['', 'Any'], 'active', 'expired', 'revoked'] },
      ],
      onSubmit: async (v) => {
        filters = v;
        await list.reload();
      },
    })),
    section('Keys', list),
    note('Keys are used as "Authorization: Bearer <secret>" on the proxy’s /v1 endpoints.'),
  ));
}

export function apiKey({ id, go }) {
  const shown = h('div');
  return loaded(() => Promise.all([get(`/api-keys/${id}`), get(`/api-keys/${id}/limits`)]), ([k, limits], reload) => page(
    `API key ${k.name}`,
    shown,
    section('Key', dl([
      ['Prefix', h('code', {}, k.key_prefix)], ['Status', k.status], ['Team', k.team_id ? h('a', { href: `#/teams/${k.team_id}` }, k.team_id) : 'none'],
      ['Permissions', (k.permissions || []).join(', ')], ['Created', fmt.time(k.created_at)], ['Expires', fmt.time(k.expires_at)],
      ['Spend', spendMeter(limits.spend, limits.budget)], ['Previous secret valid until', fmt.time(k.previous_key_expires_at)],
    ])),
    section('Restrictions', form({
      label: 'Key restrictions',
      fields: [
        { name: 'name', label: 'Name', required: true, value: k.name },
        { name: 'models', label: 'Allowed models (comma-separated; empty: the team’s)', type: 'list', value: (k.models || []).join(', ') },
        { name: 'expires_at', label: 'Expires (UTC)', type: 'datetime', value: k.expires_at ? k.expires_at.slice(0, 16) : '' },
        ...limitFields(k),
      ],
      onSubmit: (v) => {
        const body = { name: v.name, ...limitsOf(v, k) };
        if (JSON.stringify(v.models ?? null) !== JSON.stringify(k.models && k.models.length ? k.models : null)) body.models = v.models ?? null;
        // Sent only when changed: an expired key can still be renamed.
        const was = k.expires_at ? new Date(k.expires_at).toISOString().slice(0, 16) : null;
        const now = v.expires_at ? v.expires_at.slice(0, 16) : null;
        if (was !== now) body.expires_at = v.expires_at ?? null;
        return patch(`/api-keys/${id}`, body);
      },
      onDone: () => {
        announce('Key saved.');
        reload();
      },
    })),
    section('Regenerate', h('p', {}, 'A new secret under the same id; the old one stops at once or after the grace period.'), form({
      label: 'Regenerate key',
      submit: 'Regenerate secret',
      inline: true,
      fields: [{ name: 'grace_seconds', label: 'Grace (seconds, 0–86400)', type: 'number', min: 0, max: 86400, value: 0 }],
      onSubmit: (v) => post(`/api-keys/${id}/regenerate`, v),
      onDone: (out) => shown.replaceChildren(secretBox(`New secret of key ${out.name}`, out.key, out.warning)),
    })),
    section('Revoke', danger('Revoke key', async () => { await del(`/api-keys/${id}`); go('keys'); })),
  ));
}

export function providerKeys() {
  const list = pager({
    caption: 'Provider keys',
    load: (cursor) => get('/provider-keys', { cursor }),
    columns: [
      { label: 'Name', value: (k) => k.name },
      { label: 'Provider', value: (k) => k.provider },
      { label: 'Secret', value: (k) => h('code', {}, k.secret_hint) },
      { label: 'Status', value: (k) => k.status },
      { label: 'Version', value: (k) => String(k.version) },
      { label: 'Rotated', value: (k) => fmt.time(k.rotated_at) },
      { label: 'Old secret tried until', value: (k) => fmt.time(k.previous_valid_until) },
      { label: 'Actions', value: (k) => (k.status === 'revoked' ? null : h('div', { class: 'actions' }, rotateForm(k, list),
        btn('Test', async () => {
          try {
            const r = await post(`/provider-keys/${k.id}/test`);
            announce(r.ok ? `Key ${k.name} works (${r.latency_ms} ms).` : `Key ${k.name} refused: ${r.status} ${r.message}`);
          } catch (e) {
            announce(e.message);
          }
        }, { aria: `Test key ${k.name}` }),
        danger('Revoke', async () => { await del(`/provider-keys/${k.id}`); list.reload(); }, `Revoke provider key ${k.name}`))) },
    ],
  });
  return page(
    'Provider keys',
    note('Secrets are sealed with gw’s master key (AES-256-GCM); only their last characters are ever shown.'),
    section('Keys', list),
    section('Add a key', form({
      label: 'Add provider key',
      submit: 'Add key',
      fields: [
        { name: 'name', label: 'Name', required: true },
        { name: 'provider', label: 'Provider', required: true, placeholder: 'openai' },
        { name: 'secret', label: 'Secret', type: 'password', required: true, autocomplete: 'off' },
      ],
      onSubmit: (v) => post('/provider-keys', v),
      onDone: (k, el) => {
        el.reset();
        announce(`Provider key ${k.name} added.`);
        list.reload();
      },
    })),
  );
}

function rotateForm(k, list) {
  const f = form({
    label: `Rotate ${k.name}`,
    inline: true,
    submit: 'Rotate',
    fields: [
      { name: 'secret', label: `New secret for ${k.name}`, type: 'password', required: true, autocomplete: 'off' },
      { name: 'overlap_seconds', label: 'Overlap (seconds)', type: 'number', min: 0, value: 300 },
    ],
    onSubmit: (v) => post(`/provider-keys/${k.id}/rotate`, v),
    onDone: (out) => {
      announce(`Provider key ${out.name} rotated to version ${out.version}.`);
      list.reload();
    },
  });
  return h('details', {}, h('summary', {}, `Rotate ${k.name}`), f);
}
