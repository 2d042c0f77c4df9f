import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import {
  APIError,
  IAgentsState,
  ICaptureState,
  IHit,
  IIndexJob,
  ISearchResult,
  IStats,
  ITuneJob,
  ITuneOptions,
  QUERY_SOURCES,
  currentTune,
  formatParts,
  formatRanks,
  forgetItem,
  forgetSource,
  hasWords,
  indexLine,
  locationLabel,
  restoreItems,
  agentsLine,
  baseName,
  captureDetails,
  captureLine,
  getAgents,
  getCapture,
  getStats,
  refineLine,
  search,
  startIndex,
  startTune,
  teamLine,
  tuneJob,
  tuneLine,
  updateItem,
  waitForJob,
  waitForTune
} from './api';

const KINDS = [
  '',
  'markdown',
  'notebook',
  'code',
  'text',
  'chat',
  'execution',
  'memory'
];
const DEBOUNCE_MS = 300;
/** How long a forgotten hit's Undo stays (the explorer widget's lasts as long). */
export const UNDO_MS = 10_000;
/** How often a running index job is asked how far it is. */
const INDEX_POLL_MS = 400;
/** How often the capture and agents lines are asked again while the sidebar shows. */
const STATE_POLL_MS = 5_000;
/**
 * How often the memory's refinement is asked how far it is, while it goes on; also the least
 * time between two asks for the team's state after searches.
 */
const REFINE_POLL_MS = 3_000;
/** As `WEAK_LABEL` and `CLOSEST` in nbmemory/options.py, which the notebook views use. */
const WEAK_LABEL =
  "weaker matches: far in meaning, and holding under half of the query's keywords";
const CLOSEST = 3;

export interface IPanelOptions {
  /** Open a hit: its file, or its notebook at the cell. */
  openHit: (hit: IHit) => Promise<void>;
}

/** An element whose text is set with textContent: stored text is never parsed as HTML. */
function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/**
 * The Memory sidebar: a search box with live results, filters, an explain view,
 * per-hit actions (forget with an Undo, pin, raise importance), an "Index" row that follows a run
 * (bar, counts, rate, time left) and a "Tune model" button with its options and status line.
 */
export class MemoryPanel extends Widget {
  topK = 10;
  defaultNamespace = '';

  constructor(options: IPanelOptions) {
    super();
    this._openHit = options.openHit;
    this.id = 'nbmemory-sidebar';
    this.addClass('jp-nbmemory-panel');
    this.title.caption = 'Memory';

    const controls = el('div', 'jp-nbmemory-controls');
    this._input = el('input', 'jp-nbmemory-query');
    this._input.type = 'search';
    this._input.placeholder = 'Search memory';
    this._input.setAttribute('aria-label', 'Search memory');
    // Typed: the last word may be unfinished, so it is searched as the beginning of a word.
    this._input.addEventListener('input', () => this._schedule(true));
    this._input.addEventListener('keydown', event => {
      if (event.key === 'Enter') {
        void this.refresh(true);
      }
    });

    const filters = el('div', 'jp-nbmemory-filters');
    this._namespace = el('input', 'jp-nbmemory-namespace');
    this._namespace.type = 'text';
    this._namespace.placeholder = 'namespace';
    this._namespace.setAttribute('aria-label', 'Namespace');
    this._namespace.addEventListener('input', () => this._schedule());
    this._kind = el('select', 'jp-nbmemory-kind');
    this._kind.setAttribute('aria-label', 'Kind');
    for (const kind of KINDS) {
      const option = el('option', undefined, kind || 'all kinds');
      option.value = kind;
      this._kind.appendChild(option);
    }
    this._kind.addEventListener('change', () => void this.refresh());
    filters.append(this._namespace, this._kind);
    // Toggles on their own row: at the default sidebar width the filters need the whole row.
    const toggles = el('div', 'jp-nbmemory-toggles');
    const toggle = (
      className: string,
      label: string,
      title: string
    ): HTMLInputElement => {
      const wrapper = el('label', className);
      wrapper.title = title;
      const box = el('input');
      box.type = 'checkbox';
      box.addEventListener('change', () => void this.refresh());
      wrapper.append(box, document.createTextNode(label));
      toggles.appendChild(wrapper);
      return box;
    };
    this._chunksToggle = toggle(
      'jp-nbmemory-chunks-toggle',
      'every chunk',
      'List every matching chunk instead of one result per file'
    );
    this._explainToggle = toggle(
      'jp-nbmemory-explain-toggle',
      'explain',
      'Show how the results were ranked'
    );
    controls.append(this._input, filters, toggles);

    this._status = el('div', 'jp-nbmemory-status');
    this._status.setAttribute('role', 'status');
    this._results = el('ul', 'jp-nbmemory-results');
    this._explain = el('pre', 'jp-nbmemory-explain');
    this._explain.hidden = true;

    // Tuning takes minutes: the run goes on in the server, this line follows it.
    const tune = el('div', 'jp-nbmemory-tune');
    this._tuneButton = el('button', 'jp-nbmemory-tune-button', 'Tune model');
    this._tuneButton.title =
      'Fine-tune the embedding model on this memory in the background; adopt it only if it is better';
    this._tuneButton.addEventListener('click', () => void this.tune());
    const optionsToggle = el(
      'button',
      'jp-nbmemory-tune-options-toggle',
      'Options'
    );
    optionsToggle.title = 'Tuning options (empty: the default)';
    optionsToggle.setAttribute('aria-expanded', 'false');
    this._tuneStatus = el('span', 'jp-nbmemory-tune-status');
    this._tuneStatus.setAttribute('role', 'status');
    const form = this._tuneOptionsForm();
    optionsToggle.addEventListener('click', () => {
      form.hidden = !form.hidden;
      optionsToggle.setAttribute('aria-expanded', String(!form.hidden));
    });
    tune.append(this._tuneButton, optionsToggle, this._tuneStatus, form);
    this.node.append(
      controls,
      this._status,
      this._results,
      this._explain,
      this._stateLines(),
      this._indexRow(),
      tune
    );
  }

  /**
   * The memory's state, a line each, hidden while there is nothing to say or the server has no
   * endpoint for it: which kernels capture their cells, the agents' tools, the refinement, the
   * team memory.
   */
  private _stateLines(): HTMLDivElement {
    const lines = el('div', 'jp-nbmemory-state');
    lines.setAttribute('role', 'status');
    this._captureLine = el('div', 'jp-nbmemory-capture');
    this._agentsLine = el('div', 'jp-nbmemory-agents');
    this._refineLine = el('div', 'jp-nbmemory-refine');
    this._teamLine = el('div', 'jp-nbmemory-team');
    for (const line of [
      this._captureLine,
      this._agentsLine,
      this._refineLine,
      this._teamLine
    ]) {
      line.hidden = true;
      lines.appendChild(line);
    }
    return lines;
  }

  /** Show capture's state (null: the server has no capture endpoint, the line hides). */
  showCapture(state: ICaptureState | null): void {
    this._captureMissing = state === null;
    this._captureLine.hidden = state === null;
    if (state !== null) {
      this._captureLine.textContent = captureLine(state);
      this._captureLine.title = captureDetails(state);
      this._captureLine.dataset.kernels = String(state.kernels.length);
      this._captureLine.dataset.serverWide = String(state.server_wide);
    }
  }

  /** Show the agents' tools (null or not installed: the line hides). */
  showAgents(state: IAgentsState | null): void {
    this._agentsMissing = state === null;
    const line = state === null ? null : agentsLine(state);
    this._agentsLine.hidden = line === null;
    this._agentsLine.textContent = line ?? '';
    this._agentsLine.title = [
      state?.tools.length ? `Tools: ${state.tools.join(', ')}` : '',
      state?.url ? `MCP server: ${state.url}` : ''
    ]
      .filter(Boolean)
      .join('\n');
    if (state !== null) {
      this._agentsLine.dataset.mode = state.mode;
    }
  }

  /**
   * Ask the server again for capture's and the agents' state; an endpoint that answered 404 is
   * not asked again (this server has none).
   */
  refreshState(): Promise<void> {
    // One question at a time: a poll and a kernel's start may ask together.
    this._stateAsk ??= this._askState().finally(() => {
      this._stateAsk = null;
    });
    return this._stateAsk;
  }

  private async _askState(): Promise<void> {
    const asks: Promise<void>[] = [];
    if (!this._captureMissing) {
      asks.push(getCapture().then(state => this.showCapture(state)));
    }
    if (!this._agentsMissing) {
      asks.push(getAgents().then(state => this.showAgents(state)));
    }
    const results = await Promise.allSettled(asks);
    for (const result of results) {
      if (result.status === 'rejected') {
        console.warn('nbmemory: cannot ask for the state', result.reason);
      }
    }
  }

  /**
   * Ask the server's stats for the lines they make: how far the memory's passages are
   * (`refining: 2,140 of 11,345 passages`), asked again every few seconds while they are being
   * added and hidden once they are all there; and the team memory, hidden when none is attached.
   */
  async refreshStats(): Promise<void> {
    window.clearTimeout(this._refineTimer);
    this._statsAskedAt = Date.now();
    let stats: IStats | null = null;
    try {
      stats = await getStats();
    } catch (error) {
      console.warn('nbmemory: cannot ask for the stats', error);
    }
    const line = refineLine(stats);
    this._refineLine.hidden = line === null;
    this._refineLine.textContent = line ?? '';
    this._showTeam(stats);
    // Two asks at once (a show and an index run's end) leave one poll, not two.
    window.clearTimeout(this._refineTimer);
    if (line !== null && !this.isDisposed) {
      this._refineTimer = window.setTimeout(
        () => void this.refreshStats(),
        REFINE_POLL_MS
      );
    }
  }

  /** The team line: a warning while the team's catalog cannot be reached. */
  private _showTeam(stats: IStats | null): void {
    const line = teamLine(stats);
    this._teamLine.hidden = line === null;
    this._teamLine.textContent = line ?? '';
    this._teamLine.title = stats?.team
      ? `${line}\nData folder: ${stats.team.data_path}`
      : '';
    this._teamLine.classList.toggle(
      'jp-mod-warn',
      line !== null && Boolean(stats?.team?.unreachable)
    );
  }

  /** Whether the refinement line is shown and followed. */
  get refining(): boolean {
    return !this._refineLine.hidden;
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.refreshState();
    if (!this.refining) {
      void this.refreshStats();
    }
    window.clearInterval(this._stateTimer);
    // Kernels start capturing and stop at any time; asked only while the sidebar is seen.
    this._stateTimer = window.setInterval(() => {
      if (!document.hidden) {
        void this.refreshState();
      }
    }, STATE_POLL_MS);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    window.clearInterval(this._stateTimer);
  }

  dispose(): void {
    window.clearInterval(this._stateTimer);
    window.clearTimeout(this._refineTimer);
    super.dispose();
  }

  /** The "Index" row: a path, its button, and the run's bar and line while it goes. */
  private _indexRow(): HTMLDivElement {
    const row = el('div', 'jp-nbmemory-index');
    const form = el('div', 'jp-nbmemory-index-form');
    this._indexPath = el('input', 'jp-nbmemory-index-path');
    this._indexPath.type = 'text';
    this._indexPath.placeholder = 'folder or file to index';
    this._indexPath.setAttribute('aria-label', 'Folder or file to index');
    this._indexPath.title =
      'A path relative to the server root; empty: the whole root';
    // The row's own line says why a run could not start: nothing more to do with the error.
    const start = () =>
      void this.index(this._indexPath.value.trim() || '.').catch(() => null);
    this._indexPath.addEventListener('keydown', event => {
      if (event.key === 'Enter') {
        start();
      }
    });
    this._indexButton = el('button', 'jp-nbmemory-index-button', 'Index');
    this._indexButton.title =
      'Index this folder or file into the memory (only what changed is embedded again)';
    this._indexButton.addEventListener('click', start);
    form.append(this._indexPath, this._indexButton);
    this._indexBar = el('progress', 'jp-nbmemory-index-bar');
    this._indexBar.max = 1;
    this._indexBar.value = 0;
    this._indexBar.hidden = true;
    this._indexStatus = el('div', 'jp-nbmemory-index-status');
    this._indexStatus.setAttribute('role', 'status');
    row.append(form, this._indexBar, this._indexStatus);
    return row;
  }

  /** The path typed in the "Index" row. */
  get indexPathValue(): string {
    return this._indexPath.value.trim();
  }

  /** Whether an index run shown here is going on. */
  get indexing(): boolean {
    return this._indexButton.disabled;
  }

  /**
   * Index a path (relative to the server root) in the server and follow the run here until it
   * ends: the bar is the share of the work done (chunks and passages embedded), the line the
   * server's (phase, counts, rate, time left), then `done — N files, M chunks in T s`. Resolves
   * with the ended job; rejects when the run could not start.
   */
  async index(path: string, namespace?: string): Promise<IIndexJob> {
    this._indexButton.disabled = true;
    this._indexBar.hidden = false;
    this._indexBar.removeAttribute('value'); // indeterminate until the server answers
    this._setIndexStatus(`Indexing ${path}: starting`);
    try {
      const job = await waitForJob(
        await startIndex(
          [path],
          namespace || this.defaultNamespace || undefined
        ),
        running => this._showIndex(running),
        INDEX_POLL_MS
      );
      this._showIndex(job);
      if (job.state === 'done') {
        // A fast first index leaves passages to add: follow that here.
        void this.refreshStats();
        if (this.query) {
          await this.refresh();
        }
      }
      return job;
    } catch (error) {
      this._indexBar.hidden = true;
      this._setIndexStatus(
        `Indexing ${path} failed: ${(error as Error).message}`,
        true
      );
      throw error;
    } finally {
      this._indexButton.disabled = false;
    }
  }

  private _showIndex(job: IIndexJob): void {
    this._indexBar.value = job.state === 'done' ? 1 : job.progress.fraction;
    this._indexBar.classList.toggle('jp-mod-done', job.state === 'done');
    this._setIndexStatus(indexLine(job), job.state === 'error');
    this._indexStatus.dataset.phase =
      job.state === 'error' ? 'error' : job.progress.phase;
  }

  private _setIndexStatus(text: string, error = false): void {
    this._indexStatus.textContent = text;
    this._indexStatus.title = text;
    this._indexStatus.classList.toggle('jp-mod-error', error);
  }

  /** Whether a tuning run shown here is going on. */
  get tuning(): boolean {
    return this._tuneButton.disabled;
  }

  /**
   * Start a tuning run in the server with the options filled in, and follow it (a poll a second)
   * until it ends; when one is already going on, follow that one. Resolves with the ended run,
   * or null if it could not start.
   */
  async tune(): Promise<ITuneJob | null> {
    if (this.tuning) {
      return null;
    }
    const options = this._readTuneOptions();
    if (typeof options === 'string') {
      this._setTuneStatus(options, true);
      return null;
    }
    return this._followTune('Tuning: starting', async () => {
      try {
        return await startTune(options);
      } catch (error) {
        // A run started elsewhere (another tab, before a reload): follow it.
        if (
          error instanceof APIError &&
          error.status === 409 &&
          error.data?.job
        ) {
          return tuneJob(error.data.job);
        }
        throw error;
      }
    });
  }

  /**
   * Show the server's tuning run: follow the one going on (started before a reload of the page,
   * or in another tab), else show how the last one ended. Resolves with the ended run, or null
   * when the server has run none.
   */
  async resumeTune(): Promise<ITuneJob | null> {
    if (this.tuning) {
      return null;
    }
    return this._followTune('', async () => {
      try {
        return await currentTune();
      } catch (error) {
        // A page that cannot ask (the server extension is missing) shows no run, not an error.
        console.warn('nbmemory: cannot ask for the tuning run', error);
        return null;
      }
    });
  }

  /** Disable the button and follow the run `first` answers until it ends, in the status line. */
  private async _followTune(
    starting: string,
    first: () => Promise<ITuneJob | null>
  ): Promise<ITuneJob | null> {
    this._tuneButton.disabled = true;
    if (starting) {
      this._setTuneStatus(starting);
    }
    try {
      let job = await first();
      if (job === null) {
        return null;
      }
      this._setTuneStatus(tuneLine(job), false, job.status);
      job = await waitForTune(job, running =>
        this._setTuneStatus(tuneLine(running), false, running.status)
      );
      this._setTuneStatus(tuneLine(job), job.state === 'failed', job.status);
      return job;
    } catch (error) {
      // A 400 is a refused request (a bad option, a memory owned elsewhere): nothing ran.
      const refused = error instanceof APIError && error.status === 400;
      this._setTuneStatus(
        `Tuning ${refused ? 'not started' : 'failed'}: ${(error as Error).message}`,
        true
      );
      return null;
    } finally {
      this._tuneButton.disabled = false;
    }
  }

  /** The options area under the tuning button, collapsed until "Options" is clicked. */
  private _tuneOptionsForm(): HTMLDivElement {
    const form = el('div', 'jp-nbmemory-tune-options');
    form.hidden = true;
    const field = <T extends HTMLElement>(
      name: string,
      label: string,
      title: string,
      input: T
    ): T => {
      const wrapper = el('label');
      wrapper.title = title;
      input.className = `jp-nbmemory-tune-${name}`;
      wrapper.append(el('span', undefined, label), input);
      form.appendChild(wrapper);
      return input;
    };
    const number = (min: number): HTMLInputElement => {
      const input = el('input');
      input.type = 'number';
      input.min = String(min);
      input.step = '1';
      input.placeholder = 'default';
      return input;
    };
    this._tuneEpochs = field(
      'epochs',
      'epochs',
      'Training epochs (default 1)',
      number(1)
    );
    this._tuneMaxSteps = field(
      'max-steps',
      'max steps',
      'Cap on training steps (default 150 on CPU, none on CUDA; 0: none)',
      number(0)
    );
    const sources = el('select');
    for (const source of ['', ...QUERY_SOURCES]) {
      const option = el('option', undefined, source || 'default (title, log)');
      option.value = source;
      sources.appendChild(option);
    }
    this._tuneSource = field(
      'query-source',
      'query source',
      'Where the training queries come from: headings, first sentences, or searches typed before',
      sources
    );
    return form;
  }

  /** The options filled in (an empty box means the default and is not sent), or what is wrong. */
  private _readTuneOptions(): ITuneOptions | string {
    const numbers: [string, HTMLInputElement][] = [
      ['epochs', this._tuneEpochs],
      ['max steps', this._tuneMaxSteps]
    ];
    // A box holding what is no number reads as empty: say so rather than run with the default.
    const bad = numbers.find(([, input]) => input.validity.badInput);
    if (bad) {
      return `Tuning not started: ${bad[0]} must be a number`;
    }
    const options: ITuneOptions = {};
    if (this._tuneEpochs.value !== '') {
      options.epochs = Number(this._tuneEpochs.value);
    }
    if (this._tuneMaxSteps.value !== '') {
      options.max_steps = Number(this._tuneMaxSteps.value);
    }
    if (this._tuneSource.value) {
      options.query_source = this._tuneSource.value;
    }
    return options;
  }

  /** The text in the search box. */
  get query(): string {
    return this._input.value;
  }

  /** Put a query in the box and search now. */
  setQuery(query: string): Promise<void> {
    this._input.value = query;
    return this.refresh();
  }

  /** Put the focus in the search box, now and once the shell has finished activating the panel. */
  focusInput(): void {
    const focus = () => {
      this._input.focus();
      this._input.select();
    };
    focus();
    requestAnimationFrame(focus);
  }

  protected onActivateRequest(msg: Message): void {
    super.onActivateRequest(msg);
    if (this.isAttached) {
      this._input.focus();
    }
  }

  /**
   * Search again with the current query and filters; a search overtaken by a newer one is
   * dropped. `typed`: the query is being typed, so its last word, unless a space ends it, is
   * searched as the beginning of a word (`pelic` finds "pelican").
   */
  async refresh(typed = false): Promise<void> {
    window.clearTimeout(this._timer);
    const query = this._input.value.trim();
    const ticket = ++this._ticket;
    if (!query || !hasWords(query)) {
      this._results.replaceChildren();
      delete this._results.dataset.query;
      this._explain.hidden = true;
      this._setStatus(
        query ? 'Type a word to search for (a letter or a digit)' : ''
      );
      return;
    }
    this._setStatus('Searching…');
    const chunks = this._chunksToggle.checked;
    try {
      const result = await search(
        typed ? this._input.value.trimStart() : query,
        {
          k: this.topK,
          namespace: this._namespace.value.trim() || this.defaultNamespace,
          kind: this._kind.value,
          explain: this._explainToggle.checked,
          chunks,
          prefix: typed
        }
      );
      if (ticket !== this._ticket) {
        return;
      }
      this._render(result, !chunks);
      this._results.dataset.query = query;
      const n = result.hits.length;
      this._setStatus(`${n} ${n === 1 ? 'hit' : 'hits'} in ${result.ms} ms`);
      this._status.title =
        result.searched && result.searched !== query
          ? `Searched for: ${result.searched}`
          : '';
      this._explain.hidden = !this._explainToggle.checked;
      this._explain.textContent = result.explain ?? '';
      // A search is when the server finds the team's catalog gone, or back: the line follows.
      if (
        !this._teamLine.hidden &&
        Date.now() - this._statsAskedAt >= REFINE_POLL_MS
      ) {
        void this.refreshStats();
      }
    } catch (error) {
      if (ticket === this._ticket) {
        this._setStatus((error as Error).message, true);
      }
    }
  }

  private _schedule(typed = false): void {
    window.clearTimeout(this._timer);
    this._timer = window.setTimeout(
      () => void this.refresh(typed),
      DEBOUNCE_MS
    );
  }

  private _setStatus(text: string, error = false): void {
    this._status.textContent = text;
    this._status.classList.toggle('jp-mod-error', error);
  }

  private _setTuneStatus(text: string, error = false, title = ''): void {
    this._tuneStatus.textContent = text;
    this._tuneStatus.title = title || text;
    this._tuneStatus.classList.toggle('jp-mod-error', error);
  }

  /** Show a search's hits; `grouped`: one per file, so a file's hit stands for the file. */
  private _render(result: ISearchResult, grouped = true): void {
    const rows: HTMLLIElement[] = [];
    const scale = result.scale ?? '';
    if (result.rejected && result.hits.length) {
      // A flagged search keeps its hits: say plainly that none of them is a confident answer,
      // and fold its few closest items under that.
      const notice = el('li', 'jp-nbmemory-notice', 'No confident match.');
      notice.title = result.reason ?? '';
      const closest = result.hits.slice(0, CLOSEST);
      const fold = el('li', 'jp-nbmemory-closest');
      const details = el('details');
      const list = el('ul', 'jp-nbmemory-closest-list');
      list.append(...closest.map(hit => this._renderHit(hit, scale, grouped)));
      details.append(
        el(
          'summary',
          undefined,
          `Show the ${closest.length} closest item${closest.length === 1 ? '' : 's'}`
        ),
        list
      );
      fold.appendChild(details);
      this._results.replaceChildren(notice, fold);
      return;
    }
    let weakShown = false;
    for (const hit of result.hits) {
      if (hit.weak && !weakShown) {
        rows.push(el('li', 'jp-nbmemory-separator', WEAK_LABEL));
        weakShown = true;
      }
      rows.push(this._renderHit(hit, scale, grouped));
    }
    this._results.replaceChildren(...rows);
  }

  private _renderHit(hit: IHit, scale = '', grouped = true): HTMLLIElement {
    const li = el('li', 'jp-nbmemory-hit');
    li.dataset.id = String(hit.id);
    if (hit.path) {
      li.dataset.path = hit.path;
    }
    if (hit.cell_index !== null) {
      li.dataset.cellIndex = String(hit.cell_index);
    }

    if (hit.weak) {
      li.classList.add('jp-mod-weak');
    }

    // The location has a line of its own, wrapped, so the line or cell always shows.
    const head = el('div', 'jp-nbmemory-hit-head');
    const location = el('span', 'jp-nbmemory-location', locationLabel(hit));
    location.title = hit.path ?? hit.source ?? hit.location;
    if (hit.path) {
      location.classList.add('jp-mod-link');
      location.setAttribute('role', 'link');
      location.tabIndex = 0;
      const open = () =>
        void this._openHit(hit).catch(e => this._setStatus(String(e), true));
      location.addEventListener('click', open);
      location.addEventListener('keydown', event => {
        if (event.key === 'Enter') {
          open();
        }
      });
    }
    head.appendChild(location);
    if (hit.store === 'team') {
      const badge = el('span', 'jp-nbmemory-store-team', 'team');
      badge.title = `In the team memory (${hit.namespace})`;
      head.appendChild(badge);
    }
    li.appendChild(head);

    const meta = el('div', 'jp-nbmemory-ranks');
    const score = el('span', 'jp-nbmemory-score', hit.score.toFixed(3));
    // What the score is made of, and what a score is, on hover.
    score.title = [formatParts(hit.parts), scale].filter(Boolean).join('\n');
    meta.append(
      score,
      document.createTextNode(
        ` · ${formatRanks(hit.ranks)} · ${hit.kind} · ${hit.namespace}`
      )
    );
    li.appendChild(meta);
    if (hit.heading) {
      li.appendChild(el('div', 'jp-nbmemory-heading', hit.heading));
    }
    li.appendChild(el('div', 'jp-nbmemory-snippet', hit.snippet || hit.text));
    if (hit.more?.length) {
      const part = hit.kind === 'chat' ? 'message' : 'cell';
      const unit =
        hit.cell_index !== null
          ? `${part}${hit.more.length > 1 ? 's' : ''} `
          : '';
      const more = el(
        'div',
        'jp-nbmemory-more',
        `+${hit.more.length} more ${unit}in this file`
      );
      more.title = 'Tick "every chunk" to list them';
      li.appendChild(more);
    }

    const actions = el('div', 'jp-nbmemory-actions');
    // One result per file: the hit stands for its file, and forgetting its chunk alone would
    // bring the file back with its next chunk. So Forget forgets the file, every chunk of it.
    const wholeFile = grouped && hit.source !== null;
    const forget = el(
      'button',
      'jp-nbmemory-forget',
      wholeFile ? 'Forget file' : 'Forget'
    );
    forget.title = wholeFile
      ? 'Forget this file: all its chunks leave the results (Undo brings them back)'
      : 'Forget this item: it never appears in results again';
    forget.addEventListener('click', async () => {
      try {
        const { forgotten } = wholeFile
          ? await forgetSource(hit.id)
          : await forgetItem(hit.id);
        const ids = forgotten.length ? forgotten : [hit.id];
        li.replaceWith(this._undoRow(hit, ids, wholeFile));
        this._setStatus(
          wholeFile
            ? `Forgot ${this._fileName(hit)} (${ids.length} chunk${ids.length === 1 ? '' : 's'})`
            : `Forgot #${hit.id}`
        );
      } catch (e) {
        this._setStatus((e as Error).message, true);
      }
    });
    const pin = el('button', 'jp-nbmemory-pin', 'Pin');
    pin.title = 'Pin this item';
    pin.addEventListener('click', async () => {
      try {
        await updateItem(hit.id, { pinned: true });
        pin.textContent = 'Pinned';
        pin.disabled = true;
      } catch (e) {
        this._setStatus((e as Error).message, true);
      }
    });
    const raise = el('button', 'jp-nbmemory-raise', 'Importance +');
    raise.title = `Raise importance (now ${hit.importance.toFixed(1)})`;
    raise.addEventListener('click', async () => {
      const importance = Math.min(
        1,
        Math.round((hit.importance + 0.1) * 10) / 10
      );
      try {
        const item = await updateItem(hit.id, { importance });
        hit.importance = item.importance;
        raise.title = `Raise importance (now ${item.importance.toFixed(1)})`;
        this._setStatus(`#${hit.id} importance ${item.importance.toFixed(1)}`);
      } catch (e) {
        this._setStatus((e as Error).message, true);
      }
    });
    actions.append(forget, pin, raise);
    li.appendChild(actions);
    return li;
  }

  /** The file a hit comes from, by its name. */
  private _fileName(hit: IHit): string {
    return baseName(hit.path ?? hit.source ?? '');
  }

  /**
   * What stands in a forgotten hit's place for `UNDO_MS`: "Forgot <where>" (a whole file: its
   * name and how many chunks) and an Undo button that brings back all of `ids` and searches
   * again (the hit comes back in its place).
   */
  private _undoRow(hit: IHit, ids: number[], wholeFile = false): HTMLLIElement {
    const row = el('li', 'jp-nbmemory-undo-row');
    row.dataset.id = String(hit.id);
    const undo = el('button', 'jp-nbmemory-undo', 'Undo');
    undo.title = wholeFile ? 'Bring this file back' : 'Bring this item back';
    const chunks = `${ids.length} chunk${ids.length === 1 ? '' : 's'}`;
    row.append(
      el(
        'span',
        'jp-nbmemory-undo-text',
        wholeFile
          ? `Forgot ${this._fileName(hit)} (${chunks})`
          : `Forgot #${hit.id} · ${locationLabel(hit)}`
      ),
      undo
    );
    const timer = window.setTimeout(() => row.remove(), UNDO_MS);
    undo.addEventListener('click', async () => {
      window.clearTimeout(timer);
      undo.disabled = true;
      try {
        const { restored } = await restoreItems(ids);
        row.remove();
        await this.refresh();
        const said = !restored.length
          ? 'Nothing to restore'
          : wholeFile
            ? `Restored ${this._fileName(hit)} (${restored.length} chunk${restored.length === 1 ? '' : 's'})`
            : `Restored #${restored.join(', #')}`;
        this._setStatus(`${said} · ${this._status.textContent}`);
      } catch (e) {
        undo.disabled = false;
        this._setStatus((e as Error).message, true);
      }
    });
    return row;
  }

  private _openHit: (hit: IHit) => Promise<void>;
  private _input: HTMLInputElement;
  private _namespace: HTMLInputElement;
  private _kind: HTMLSelectElement;
  private _explainToggle: HTMLInputElement;
  private _chunksToggle: HTMLInputElement;
  private _status: HTMLDivElement;
  private _results: HTMLUListElement;
  private _explain: HTMLPreElement;
  private _tuneButton: HTMLButtonElement;
  private _tuneStatus: HTMLSpanElement;
  private _tuneEpochs!: HTMLInputElement;
  private _tuneMaxSteps!: HTMLInputElement;
  private _tuneSource!: HTMLSelectElement;
  private _indexPath!: HTMLInputElement;
  private _indexButton!: HTMLButtonElement;
  private _indexBar!: HTMLProgressElement;
  private _indexStatus!: HTMLDivElement;
  private _captureLine!: HTMLDivElement;
  private _agentsLine!: HTMLDivElement;
  private _refineLine!: HTMLDivElement;
  private _teamLine!: HTMLDivElement;
  private _captureMissing = false;
  private _agentsMissing = false;
  private _stateAsk: Promise<void> | null = null;
  private _stateTimer = 0;
  private _refineTimer = 0;
  private _statsAskedAt = 0;
  private _timer = 0;
  private _ticket = 0;
}
