import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { LabIcon } from '@jupyterlab/ui-components';

// eslint-disable-next-line jupyter/prefer-lazy-imports -- activate() asks for the built-in notebooks at once
import {
  AGENT_MODES,
  APIError,
  AgentMode,
  IHit,
  baseName,
  builtinNotebooks,
  copyNotebook,
  remember,
  setAgents,
  setCapture,
  startIndex,
  waitForJob
} from './api';
// eslint-disable-next-line jupyter/prefer-lazy-imports -- activate() adds the sidebar at once
import { MemoryPanel } from './panel';

const PLUGIN_ID = 'nbmemory:plugin';

namespace CommandIDs {
  export const search = 'nbmemory:search';
  export const rememberSelection = 'nbmemory:remember-selection';
  export const rememberCell = 'nbmemory:remember-cell';
  export const indexNotebook = 'nbmemory:index-notebook';
  export const index = 'nbmemory:index';
  export const searchSelection = 'nbmemory:search-selection';
  export const tune = 'nbmemory:tune';
  export const openDiagnostics = 'nbmemory:open-diagnostics-notebook';
  export const openBeir = 'nbmemory:open-beir-notebook';
}

/** The built-in notebooks by the server's name for them: their command and label. */
const NOTEBOOK_COMMANDS: { [name: string]: { id: string; label: string } } = {
  diagnostics: { id: CommandIDs.openDiagnostics, label: 'Memory diagnostics' },
  beir: { id: CommandIDs.openBeir, label: 'BEIR evaluation' }
};

/** The launcher's section for nbmemory's notebooks. */
const LAUNCHER_CATEGORY = 'Memory';

const memoryIcon = new LabIcon({
  name: 'nbmemory:memory',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
    '<path class="jp-icon3" fill="#616161" d="M12 3C7 3 3 4.8 3 7v10c0 2.2 4 4 9 4s9-1.8 9-4V7c0-2.2-4-4-9-4zm0 2c4.4 0 7 1.4 7 2s-2.6 2-7 2-7-1.4-7-2 2.6-2 7-2zm7 12c0 .6-2.6 2-7 2s-7-1.4-7-2v-2.3c1.6.8 4.1 1.3 7 1.3s5.4-.5 7-1.3V17zm0-5c0 .6-2.6 2-7 2s-7-1.4-7-2V9.7c1.6.8 4.1 1.3 7 1.3s5.4-.5 7-1.3V12z"/>' +
    '</svg>'
});

/** The text selected in the current editor (a notebook cell or a file), else in the page. */
function selectedText(app: JupyterFrontEnd, tracker: INotebookTracker): string {
  const current = app.shell.currentWidget as any;
  let editor: any = null;
  if (current && current === tracker.currentWidget) {
    editor = tracker.activeCell?.editor ?? null;
  } else if (current?.content?.editor) {
    editor = current.content.editor;
  }
  if (editor) {
    const selection = editor.getSelection();
    const start = editor.getOffsetAt(selection.start);
    const end = editor.getOffsetAt(selection.end);
    if (start !== end) {
      return editor.model.sharedModel
        .getSource()
        .slice(Math.min(start, end), Math.max(start, end));
    }
  }
  return window.getSelection()?.toString() ?? '';
}

/** Where to open a file: a cell of a notebook, or a line range of a text file. */
interface ITarget {
  cell_id: string | null;
  cell_index: number | null;
  line_start: number | null;
  line_end: number | null;
}

/** Where the text to remember came from: the document's path and the cell or lines in it. */
function selectionPlace(
  app: JupyterFrontEnd,
  tracker: INotebookTracker
): { source?: string; heading?: string } {
  const current = app.shell.currentWidget as any;
  if (current && current === tracker.currentWidget) {
    const index = (current as NotebookPanel).content.activeCellIndex;
    return {
      source: current.context.path,
      heading: `${baseName(current.context.path)}, cell ${index + 1}`
    };
  }
  const editor = current?.content?.editor;
  if (editor && current?.context?.path) {
    const { start, end } = editor.getSelection();
    const first = Math.min(start.line, end.line) + 1;
    const last = Math.max(start.line, end.line) + 1;
    const lines =
      first === last ? `line ${first}` : `lines ${first}\u2013${last}`;
    return {
      source: current.context.path,
      heading: `${baseName(current.context.path)}, ${lines}`
    };
  }
  return {};
}

/** A path as the document manager opens it: relative to the server root, or null outside it. */
function serverPath(source: string): string | null {
  const root = PageConfig.getOption('serverRoot').replace(/[\\/]+$/, '');
  if (!root || root.startsWith('~')) {
    return null;
  }
  return source.startsWith(root + '/') ? source.slice(root.length + 1) : null;
}

/** Put a text editor's cursor on a line and scroll its range into view. */
async function revealLines(widget: any, target: ITarget): Promise<void> {
  const editor = widget?.content?.editor;
  if (!editor || target.line_start === null) {
    return;
  }
  await widget.context?.ready;
  await widget.revealed;
  const last = Math.max(0, editor.lineCount - 1);
  const line = Math.min(Math.max(target.line_start - 1, 0), last);
  const end = Math.min(
    Math.max((target.line_end ?? target.line_start) - 1, line),
    last
  );
  editor.setCursorPosition({ line, column: 0 });
  // CodeMirror's EditorView: centre the range's first line, with the lines above it for context.
  const view = editor.editor;
  const scrollIntoView = view?.constructor?.scrollIntoView;
  if (scrollIntoView && view.state?.doc) {
    view.dispatch({
      effects: scrollIntoView(view.state.doc.line(line + 1).from, {
        y: 'center'
      })
    });
  } else {
    editor.revealSelection({
      start: { line, column: 0 },
      end: { line: end, column: 0 }
    });
  }
  editor.focus();
}

/**
 * The line of a chat file (JSON) where the message `id` is, from 1: a `.chat` file opened as
 * text (no jupyterlab-chat in this Lab) shows its message there. Null when it is not found.
 */
function messageLine(source: string, id: string): number | null {
  const escaped = JSON.stringify(id).replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const match = new RegExp(`"id"\\s*:\\s*${escaped}`).exec(source);
  if (!match) {
    return null;
  }
  return source.slice(0, match.index).split('\n').length;
}

/** Open a notebook at a cell: by cell id, else by index; make it active and scroll to it. */
async function revealCell(panel: NotebookPanel, hit: ITarget): Promise<void> {
  await panel.context.ready;
  await panel.revealed;
  const notebook = panel.content;
  let index = -1;
  if (hit.cell_id) {
    index = notebook.widgets.findIndex(cell => cell.model.id === hit.cell_id);
  }
  if (
    index < 0 &&
    hit.cell_index !== null &&
    hit.cell_index < notebook.widgets.length
  ) {
    index = hit.cell_index;
  }
  if (index < 0) {
    return;
  }
  notebook.activeCellIndex = index;
  notebook.deselectAll();
  await notebook.scrollToItem(index, 'center');
  notebook.activeCell?.node.focus();
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'The Memory sidebar: hybrid search over nbmemory, remember and index from notebooks.',
  autoStart: true,
  requires: [IDocumentManager, INotebookTracker],
  optional: [
    ICommandPalette,
    ISettingRegistry,
    ILayoutRestorer,
    ILauncher,
    IDefaultFileBrowser
  ],
  activate: (
    app: JupyterFrontEnd,
    docManager: IDocumentManager,
    tracker: INotebookTracker,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null,
    launcher: ILauncher | null,
    fileBrowser: IDefaultFileBrowser | null
  ) => {
    let autoIndexOnSave = false;

    /** Open a file in this Lab at its cell (notebooks) or line range (text files). */
    const openAt = async (path: string, target: ITarget): Promise<void> => {
      const widget = docManager.openOrReveal(path);
      if (widget instanceof NotebookPanel) {
        await revealCell(widget, target);
      } else if (widget) {
        await revealLines(widget, target);
      }
    };

    /**
     * Open a chat at a message: with the factory Lab has for `.chat` files (jupyterlab-chat's
     * chat where it is installed, the text editor otherwise, at the message's line).
     */
    const openChat = async (path: string, hit: IHit): Promise<void> => {
      const widget = docManager.openOrReveal(path) as any;
      const editor = widget?.content?.editor;
      if (!editor || !hit.cell_id) {
        return;
      }
      await widget.context?.ready;
      const line = messageLine(
        editor.model.sharedModel.getSource(),
        hit.cell_id
      );
      if (line !== null) {
        await revealLines(widget, {
          cell_id: null,
          cell_index: null,
          line_start: line,
          line_end: line
        });
      }
    };

    const openHit = async (hit: IHit): Promise<void> => {
      if (!hit.path) {
        return;
      }
      if (hit.kind === 'chat') {
        await openChat(hit.path, hit);
      } else {
        await openAt(hit.path, hit);
      }
    };

    // Links nbmemory puts in outputs and widgets (`data-nbmemory-path` and friends) open here,
    // at the line or cell, instead of the href's whole new Lab or line 1. Capture phase: it runs
    // before the rendermime's own link handler. Without this extension the href still works.
    const number = (value: string | undefined): number | null =>
      value === undefined || value === '' || isNaN(Number(value))
        ? null
        : Number(value);
    document.addEventListener(
      'click',
      event => {
        if (
          event.button !== 0 ||
          event.ctrlKey ||
          event.metaKey ||
          event.shiftKey ||
          event.altKey
        ) {
          return;
        }
        const link = (event.target as Element | null)?.closest?.(
          '[data-nbmemory-path]'
        ) as HTMLElement | null;
        if (!link) {
          return;
        }
        const data = link.dataset;
        const path = data.nbmemoryOpen || serverPath(data.nbmemoryPath ?? '');
        if (!path) {
          return;
        }
        event.preventDefault();
        event.stopImmediatePropagation();
        const target: ITarget = {
          cell_id: data.nbmemoryCellId || null,
          cell_index: number(data.nbmemoryCell),
          line_start: number(data.nbmemoryLine),
          line_end: number(data.nbmemoryLineEnd)
        };
        void openAt(path, target).catch(error =>
          Notification.error(`Cannot open ${path}: ${(error as Error).message}`)
        );
      },
      true
    );

    const panel = new MemoryPanel({ openHit });
    panel.title.icon = memoryIcon;
    app.shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, 'nbmemory-sidebar');
    // A run started before this page loaded (a reload, another tab) is followed here too.
    void panel.resumeTune();
    // Kernels that start or stop change which ones capture their cells.
    app.serviceManager.sessions.runningChanged.connect(() => {
      if (panel.isVisible) {
        void panel.refreshState();
      }
    });

    const namespace = (): string | undefined =>
      panel.defaultNamespace || undefined;

    const indexPath = async (path: string, quiet = false): Promise<void> => {
      // Asked for: followed in the sidebar (bar, counts, rate, time left). A save's run is quiet.
      const done = quiet
        ? await waitForJob(await startIndex([path], namespace()))
        : await panel.index(path, namespace());
      if (done.state === 'error') {
        Notification.error(`Indexing ${path} failed: ${done.error}`);
      } else if (!quiet) {
        Notification.success(
          `Indexed ${path}: ${done.report?.summary.split('\n')[0] ?? ''}`,
          {
            autoClose: 4000
          }
        );
      }
      if (quiet && done.state === 'done') {
        void panel.refreshStats();
      }
      if (quiet && panel.query) {
        await panel.refresh();
      }
    };

    const rememberText = async (
      text: string,
      place: { source?: string; heading?: string }
    ): Promise<void> => {
      if (!text.trim()) {
        Notification.warning('Nothing to remember: select some text first.', {
          autoClose: 3000
        });
        return;
      }
      const item = await remember(text, { namespace: namespace(), ...place });
      Notification.success(`Remembered #${item.id}`, { autoClose: 3000 });
      if (panel.query) {
        await panel.refresh();
      }
    };

    app.commands.addCommand(CommandIDs.search, {
      label: 'Search memory',
      caption: 'Open the Memory sidebar and focus its search box',
      execute: async args => {
        app.shell.activateById(panel.id);
        if (typeof args.query === 'string') {
          await panel.setQuery(args.query);
        }
        panel.focusInput();
      }
    });
    app.commands.addCommand(CommandIDs.rememberSelection, {
      label: 'Remember selection',
      caption: 'Store the selected text in the memory',
      execute: () =>
        rememberText(selectedText(app, tracker), selectionPlace(app, tracker))
    });
    app.commands.addCommand(CommandIDs.rememberCell, {
      label: 'Remember cell',
      caption: "Store the active cell's source in the memory",
      isEnabled: () => tracker.activeCell !== null,
      execute: () => {
        const current = tracker.currentWidget;
        const place = current
          ? {
              source: current.context.path,
              heading: `${baseName(current.context.path)}, cell ${current.content.activeCellIndex + 1}`
            }
          : {};
        return rememberText(
          tracker.activeCell?.model.sharedModel.getSource() ?? '',
          place
        );
      }
    });
    app.commands.addCommand(CommandIDs.indexNotebook, {
      label: 'Index this notebook',
      caption: 'Index the current notebook (as saved) into the memory',
      isEnabled: () => tracker.currentWidget !== null,
      execute: async () => {
        const current = tracker.currentWidget;
        if (current) {
          await current.context.save();
          await indexPath(current.context.path);
        }
      }
    });
    app.commands.addCommand(CommandIDs.index, {
      label: 'Index a folder or file',
      caption:
        'Index a path relative to the server root (args.path; default: the path in the sidebar, else the root), following the run in the Memory sidebar',
      execute: async args => {
        app.shell.activateById(panel.id);
        const path =
          typeof args.path === 'string' && args.path
            ? args.path
            : panel.indexPathValue || '.';
        await indexPath(path);
      }
    });
    app.commands.addCommand(CommandIDs.searchSelection, {
      label: 'Search memory for selection',
      caption: 'Search the memory for the selected text',
      execute: async () => {
        const text = selectedText(app, tracker).trim();
        app.shell.activateById(panel.id);
        if (text) {
          await panel.setQuery(text);
        }
        panel.focusInput();
      }
    });

    app.commands.addCommand(CommandIDs.tune, {
      label: 'Tune model',
      caption:
        'Fine-tune the embedding model on the memory in the background, with progress in the Memory sidebar',
      isEnabled: () => !panel.tuning,
      execute: async () => {
        app.shell.activateById(panel.id);
        await panel.tune();
      }
    });

    // The built-in notebooks: a fresh copy in the file browser's folder, opened.
    for (const [name, { id, label }] of Object.entries(NOTEBOOK_COMMANDS)) {
      app.commands.addCommand(id, {
        label,
        caption: `Open a fresh copy of nbmemory's ${label} notebook in the file browser's folder`,
        icon: args => (args.isPalette ? undefined : memoryIcon),
        execute: async () => {
          const dir = fileBrowser?.model.path ?? '';
          try {
            const { path } = await copyNotebook(name, dir);
            docManager.openOrReveal(path);
          } catch (error) {
            Notification.error(
              `Cannot open the ${label} notebook: ${(error as Error).message}`
            );
          }
        }
      });
    }

    const notebookIds = new Set(
      Object.values(NOTEBOOK_COMMANDS).map(({ id }) => id)
    );
    if (palette) {
      for (const command of Object.values(CommandIDs)) {
        if (!notebookIds.has(command)) {
          palette.addItem({ command, category: 'Memory' });
        }
      }
    }
    // Offered only where the server has them: an older server has no notebooks to copy.
    void builtinNotebooks()
      .then(listed => {
        listed.forEach((notebook, rank) => {
          const command = NOTEBOOK_COMMANDS[notebook.name]?.id;
          if (!command) {
            return;
          }
          palette?.addItem({ command, category: 'Memory' });
          launcher?.add({ command, category: LAUNCHER_CATEGORY, rank });
        });
      })
      .catch(reason =>
        console.warn('nbmemory: cannot list the built-in notebooks', reason)
      );

    // Index a notebook after each save, when the setting asks for it.
    tracker.widgetAdded.connect((_, nbPanel) => {
      nbPanel.context.saveState.connect((context, state) => {
        if (state === 'completed' && autoIndexOnSave) {
          void indexPath(context.path, true).catch(error =>
            Notification.error(
              `Indexing ${context.path} failed: ${error.message}`
            )
          );
        }
      });
    });

    // Settings the server holds: sent on load only when the user set them to something other
    // than the schema's default (otherwise the server's own default stands, which may come from
    // its configuration: Lab's settings form saves every field of the plugin once any one is
    // changed, so "set" alone does not mean the person chose it), and when their value changes.
    const sent: { [key: string]: unknown } = {};
    const sendToServer = (
      settings: ISettingRegistry.ISettings,
      key: string,
      first: boolean,
      send: (value: any) => Promise<void>
    ): void => {
      const value = settings.get(key).composite;
      const changed = first
        ? settings.user[key] !== undefined &&
          JSON.stringify(value) !== JSON.stringify(settings.default(key))
        : JSON.stringify(value) !== JSON.stringify(sent[key]);
      sent[key] = value;
      if (changed) {
        void send(value).catch(error =>
          Notification.error(
            `Cannot apply the setting ${key}: ${(error as Error).message}`
          )
        );
      }
    };
    const applyServer = (
      settings: ISettingRegistry.ISettings,
      first: boolean
    ) => {
      sendToServer(settings, 'captureAllKernels', first, async value => {
        const state = await setCapture(Boolean(value));
        panel.showCapture(state);
      });
      sendToServer(settings, 'agentTools', first, async value => {
        const mode: AgentMode = AGENT_MODES.includes(value) ? value : 'on';
        try {
          panel.showAgents(await setAgents(mode));
        } catch (error) {
          // 409: no tools in this server to set the mode of; the line says what there is.
          if (!(error instanceof APIError && error.status === 409)) {
            throw error;
          }
          await panel.refreshState();
        }
      });
    };

    if (settingRegistry) {
      const apply = (settings: ISettingRegistry.ISettings) => {
        panel.topK = settings.get('topK').composite as number;
        panel.defaultNamespace = settings.get('defaultNamespace')
          .composite as string;
        autoIndexOnSave = settings.get('autoIndexOnSave').composite as boolean;
      };
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          apply(settings);
          applyServer(settings, true);
          settings.changed.connect(changed => {
            apply(changed);
            applyServer(changed, false);
          });
        })
        .catch(reason =>
          console.error('nbmemory: failed to load settings', reason)
        );
    }
  }
};

export default plugin;
