// Dig through what a forked run inherits of the zygote's JavaScript state:
// require.main (zygote.js), require.cache, module.children and Node's
// active handles, for a live handle on the zygote's control socket or
// a request of another run.
function main(args) {
  const found = [];
  const mods = Object.values(require.cache);
  const zygote = require.cache['/opt/nsbox/zygote.js'] || (require.main && require.main.filename.endsWith('zygote.js') ? require.main : null);
  for (const mod of mods) {
    for (const [key, value] of Object.entries(mod.exports || {})) {
      if (typeof value === 'function' && key === 'receive') {
        // The add-on, reached through the zygote's module tree: its control fd is 3.
        try {
          found.push(`receive(3) through ${mod.id} answered ${JSON.stringify(value(3))}`);
        } catch (e) {
          /* refused: fd 3 is our result pipe */
        }
      }
    }
  }
  // Handles Node knows: none may be a socket (the zygote's control socket,
  // nsbox's run socket) or hold an fd that is one.
  const handles = process._getActiveHandles().concat(process._getActiveRequests());
  for (const h of handles) {
    const fd = h && (h.fd ?? (h._handle && h._handle.fd));
    if (typeof fd !== 'number' || fd < 0) continue;
    try {
      if (fs.fstatSync(fd).isSocket()) found.push(`a handle holds socket fd ${fd}`);
    } catch (e) {
      /* gone */
    }
  }
  // The request text zygote.js parsed (cfg) never leaves its serve(): look
  // for another run's request anywhere in what the modules export.
  const seen = JSON.stringify(mods.map((m) => ({ id: m.id, keys: Object.keys(m.exports || {}) })));
  if (/"seccomp"|"notify"|proc_mask/.test(seen)) found.push('a request is reachable from require.cache');
  if (found.length) return escaped(found.join('; '));
  return stopped(`${mods.length} modules (zygote.js ${zygote ? 'loaded' : 'absent'}), ${handles.length} handles: nothing of the fork server's`);
}
