// Organization policies (the document editor with errors at the field, built-in templates,
// versions and revert) and the response cache (settings, purge, hit rates).
import { h } from '../dom.js';
import { get, post, put } from '../api.js';
import { announce, btn, dl, fmt, form, loaded, note, page, pager, section, table } from '../widgets.js';
import { barChart } from '../charts.js';

export function policies() {
  return loaded(() => Promise.all([get('/organizations/current/policy'), get('/organizations/current/policy/templates'), get('/teams', { limit: 200 })]),
    ([p, templates, teams], reload) => {
      const teamOptions = [['', 'The organization'], ...teams.data.map((t) => [t.id, t.name])];
      const versions = pager({
        caption: 'Policy versions',
        load: (cursor) => get('/organizations/current/policy/versions', { before: cursor }),
        columns: [
          { label: 'Version', value: (v) => String(v.version) },
          { label: 'Of', value: (v) => (v.team_id ? `team ${v.team_id}` : 'organization') },
          { label: 'Source', value: (v) => v.source },
          { label: 'When', value: (v) => fmt.time(v.created_at) },
          { label: '', value: (v) => btn(`Revert to ${v.version}`, async () => {
            try {
              await post('/organizations/current/policy/revert', { version: v.version, team_id: v.team_id || undefined });
              announce(`Reverted to version ${v.version}.`);
              reload();
            } catch (e) {
              announce(e.message);
            }
          }) },
        ],
      });
      return page(
        'Policies',
        dl([['Version', String(p.version)], ['Updated', fmt.time(p.updated_at)], ['Available policies', Object.keys(p.available || {}).join(', ')]]),
        section('Apply a template', table({
          caption: 'Built-in policy templates',
          columns: [
            { label: 'Template', value: (t) => h('code', {}, t.name) },
            { label: 'What it does', value: (t) => t.description },
            { label: 'Apply', value: (t) => form({
              label: `Apply ${t.name}`,
              inline: true,
              submit: `Apply ${t.name}`,
              fields: [{ name: 'team_id', label: `Apply ${t.name} to`, type: 'select', options: teamOptions }],
              onSubmit: (v) => post('/organizations/current/policy/apply-template', { template: t.name, team_id: v.team_id || undefined }),
              onDone: () => {
                announce(`Template ${t.name} applied.`);
                reload();
              },
            }) },
          ],
          rows: templates.data,
        })),
        section('Document', note('defaults, mandatory and policies, as in docs/policy.md; errors are shown under the editor, by path.'), form({
          label: 'Policy document',
          submit: 'Save document',
          catchAll: 'document',
          fields: [{ name: 'document', label: 'Policy document (JSON)', type: 'json', rows: 18, value: p.document, required: true }],
          onSubmit: (v) => put('/organizations/current/policy', v.document),
          onDone: (out) => {
            announce(`Saved as version ${out.version}.`);
            reload();
          },
        })),
        section('Versions', versions),
      );
    });
}

export function cache() {
  return page('Cache', loaded(() => Promise.all([get('/organizations/current/cache'), get('/analytics/cache')]), ([c, stats], reload) => [
    section('Hit rates (last 7 days)', dl([
      ['Requests', fmt.num(stats.requests)], ['Looked up', fmt.num(stats.lookups)], ['Hit rate', fmt.pct(stats.hit_rate)],
      ['Bypassed', fmt.num(stats.bypassed)], ['Saved', fmt.money(stats.saved_usd)],
    ]), barChart({
      title: 'Cache hit rate by tier',
      data: ['L1', 'L2', 'L3'].map((t) => ({ label: t, value: stats.tiers && stats.tiers[t] ? stats.tiers[t].hit_rate ?? 0 : 0 })),
      format: fmt.pct,
    })),
    section('Settings', form({
      label: 'Cache settings',
      fields: [
        { name: 'l1', label: 'L1: in each proxy’s memory', type: 'checkbox', value: c.l1 },
        { name: 'l2', label: 'L2: Redis, shared by the proxies', type: 'checkbox', value: c.l2 },
        { name: 'l3', label: 'L3: semantic (similar questions)', type: 'checkbox', value: c.l3 },
        { name: 'ttl_seconds', label: 'Time to live (seconds)', type: 'number', min: 1, value: c.ttl_seconds },
        { name: 'similarity_threshold', label: 'Similarity threshold (L3)', type: 'number', step: '0.01', min: 0, max: 1, value: c.similarity_threshold },
      ],
      onSubmit: (v) => put('/organizations/current/cache', v),
      onDone: () => {
        announce('Cache settings saved.');
        reload();
      },
    })),
    section('Purge', form({
      label: 'Purge cache',
      inline: true,
      submit: 'Purge',
      fields: [{ name: 'model', label: 'Only this model (empty: all)' }],
      onSubmit: (v) => post('/organizations/current/cache/purge', v),
      onDone: (out) => announce(`Purged ${out.l2_deleted} shared and ${out.l3_deleted} semantic entries.`),
    })),
  ]));
}
