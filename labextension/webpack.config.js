// Merged into @jupyterlab/builder's webpack configuration (package.json: jupyterlab.webpackConfig).

/**
 * Give the module federation container entry its name as module id.
 *
 * webpack's deterministic ids hash a module's identifier, and the container entry's identifier
 * holds the absolute path of lib/index.js: its id, and with it remoteEntry.<hash>.js, changed with
 * the folder the repository sits in, so a rebuild elsewhere never matched the committed bundle.
 * Runs before webpack's own id plugin, which keeps ids already given.
 */
class ContainerEntryIdFromName {
  apply(compiler) {
    compiler.hooks.compilation.tap('ContainerEntryIdFromName', compilation => {
      compilation.hooks.moduleIds.tap('ContainerEntryIdFromName', () => {
        for (const module of compilation.modules) {
          const name = module.libIdent({ context: compiler.context });
          if (name && name.startsWith('webpack/container/entry/')) {
            compilation.chunkGraph.setModuleId(module, name);
          }
        }
      });
    });
  }
}

module.exports = { plugins: [new ContainerEntryIdFromName()] };
