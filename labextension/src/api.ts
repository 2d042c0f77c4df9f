import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** One search hit, as `GET /nbmemory/search` returns it. */
export interface IHit {
  id: number;
  score: number;
  text: string;
  snippet: string;
  source: string | null;
  /** The source relative to the server root (what the sidebar opens), null outside it. */
  path: string | null;
  kind: string;
  namespace: string;
  heading: string;
  cell_id: string | null;
  /** From 0; `cell_number` is the same cell as JupyterLab numbers it, from 1. */
  cell_index: number | null;
  cell_number?: number | null;
  line_start: number | null;
  line_end: number | null;
  page: number | null;
  tags: string[];
  importance: number;
  location: string;
  /** Who wrote it: a chat message's sender. */
  speaker?: string | null;
  found_by: string[];
  ranks: { [retriever: string]: number };
  /** Ids of the file's other chunks that ranked, when results come one per file. */
  more: number[];
  /** Far in meaning and holding under half of the query's keywords: it goes under "weaker matches". */
  weak: boolean;
  /** What the score is made of, as the ranking added it (the parts sum to the score). */
  parts?: { [part: string]: number };
  /** Where the item lives: the memory file, or the team's lake (ids from 2**50). */
  store?: 'personal' | 'team';
}

export interface ISearchResult {
  query: string;
  /** The query that ran: with `prefix`, its last word stands for the indexed words it begins. */
  searched?: string;
  k: number;
  ms: number;
  hits: IHit[];
  /** True when no hit is a confident answer (the hits are the closest items). */
  rejected: boolean;
  reason: string | null;
  /** What a score is (the fusion's weights), in one sentence. */
  scale?: string;
  explain?: string;
}

export interface IItem {
  id: number;
  text: string;
  namespace: string;
  importance: number;
  pinned: boolean;
  tags: string[];
}

/** How far an index run is: `IndexProgress` of `nbmemory/progress.py`, one source for every front end. */
export interface IIndexProgress {
  /** `loading the model`, `reading files`, `embedding chunks`, `embedding passages`, `done`... */
  phase: string;
  files_read: number;
  files_total: number;
  chunks_done: number;
  chunks_total: number;
  passages_done: number;
  passages_total: number;
  /** Chunks (or passages) embedded per second; null until measured. */
  rate: number | null;
  seconds_left: number | null;
  /** How much of the work that takes time is done, 0 to 1. */
  fraction: number;
  /** The state in one line, e.g. `embedding chunks 120/370 · 12.1 chunks/s · about 25 s left`. */
  text: string;
}

export interface IIndexJob {
  id: string;
  state: 'queued' | 'running' | 'done' | 'error';
  done: number;
  total: number;
  current: string | null;
  paths: string[];
  error: string | null;
  progress: IIndexProgress;
  report: { summary: string; seconds: number } | null;
}

/** A tuning run, as `POST /nbmemory/tune` and `GET /nbmemory/tune/<job>` return it. */
export interface ITuneJob {
  job: string;
  state: 'running' | 'done' | 'failed';
  /** `starting`, `mining`, `training`, `embedding`, `gate`. */
  phase: string;
  /** How far the current phase is, 0 to 1. */
  fraction: number;
  /** One line: the phase and how far, or how the run ended. */
  status: string;
  /** Null while running; the gate's verdict when done; the error when failed. */
  report:
    | { adopted: boolean; version: string | null; reason: string }
    | { error: string }
    | null;
}

/** Where tuning may take its queries from: `QUERY_SOURCES` of `nbmemory/tune/mine.py`. */
export const QUERY_SOURCES = ['title', 'first_sentence', 'log'];

/** Tuning options by the names of `nbmemory.options.TUNE_OPTIONS`; the server fills in the rest. */
export interface ITuneOptions {
  query_source?: string | string[];
  epochs?: number;
  max_triples?: number;
  max_queries?: number;
  max_steps?: number;
  batch_size?: number;
  lr?: number;
  max_seq_length?: number;
  seed?: number;
  min_gain?: number;
  no_hard_negatives?: boolean;
}

/** A non-2xx answer of the API: the server's message, the status and the whole reply. */
export class APIError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly data: any
  ) {
    super(message);
    this.name = 'APIError';
  }
}

export interface ISearchOptions {
  k?: number;
  namespace?: string;
  kind?: string;
  explain?: boolean;
  /** Every matching chunk rather than one result per file. */
  chunks?: boolean;
  /** Read the last word, unless a space ends the query, as the beginning of a word (as you type). */
  prefix?: boolean;
}

/** Whether a query holds something to search for: a letter or a digit (the server refuses others). */
export function hasWords(query: string): boolean {
  return /[\p{L}\p{Nd}]/u.test(query);
}

/** Call the nbmemory REST API; a non-2xx answer throws an APIError carrying the server's message. */
export async function requestAPI<T>(
  endpoint: string,
  init: RequestInit = {}
): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'nbmemory', endpoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: any = {};
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { message: text };
    }
  }
  if (!response.ok) {
    throw new APIError(
      data.message || `${response.status} ${response.statusText}`,
      response.status,
      data
    );
  }
  return data as T;
}

export function search(
  query: string,
  options: ISearchOptions = {}
): Promise<ISearchResult> {
  const params = new URLSearchParams({ q: query });
  if (options.k) {
    params.set('k', String(options.k));
  }
  if (options.namespace) {
    params.set('ns', options.namespace);
  }
  if (options.kind) {
    params.set('kind', options.kind);
  }
  if (options.explain) {
    params.set('explain', '1');
  }
  if (options.chunks) {
    params.set('chunks', '1');
  }
  if (options.prefix) {
    params.set('prefix', '1');
  }
  return requestAPI<ISearchResult>(`search?${params.toString()}`);
}

export function remember(
  text: string,
  options: {
    tags?: string[];
    importance?: number;
    namespace?: string;
    /** Where the text came from: a path relative to the server root. */
    source?: string;
    /** The place in it, e.g. `cell 7` or `lines 3–5`. */
    heading?: string;
  } = {}
): Promise<IItem> {
  return requestAPI<IItem>('remember', {
    method: 'POST',
    body: JSON.stringify({ text, ...options })
  });
}

export function updateItem(
  id: number,
  changes: { importance?: number; pinned?: boolean; tags?: string[] }
): Promise<IItem> {
  return requestAPI<IItem>(`items/${id}`, {
    method: 'PATCH',
    body: JSON.stringify(changes)
  });
}

export function forgetItem(id: number): Promise<{ forgotten: number[] }> {
  return requestAPI(`items/${id}`, { method: 'DELETE' });
}

/** Forget every chunk of the file item `id` comes from (the item alone when it has none). */
export function forgetSource(id: number): Promise<{ forgotten: number[] }> {
  return requestAPI('forget', {
    method: 'POST',
    body: JSON.stringify({ source_of: id })
  });
}

/** Bring forgotten items back (the undo of a forget); answers the ids restored. */
export function restoreItems(ids: number[]): Promise<{ restored: number[] }> {
  return requestAPI('restore', {
    method: 'POST',
    body: JSON.stringify({ ids })
  });
}

export function startIndex(
  paths: string[],
  namespace?: string
): Promise<IIndexJob> {
  return requestAPI<IIndexJob>('index', {
    method: 'POST',
    body: JSON.stringify({ paths, namespace: namespace || null })
  });
}

export function indexJob(id: string): Promise<IIndexJob> {
  return requestAPI<IIndexJob>(`index/${id}`);
}

/** Poll an index job until it ends; `onProgress` sees every intermediate state. */
export async function waitForJob(
  job: IIndexJob,
  onProgress?: (job: IIndexJob) => void,
  intervalMs = 500
): Promise<IIndexJob> {
  while (job.state === 'queued' || job.state === 'running') {
    await new Promise(resolve => setTimeout(resolve, intervalMs));
    job = await indexJob(job.id);
    onProgress?.(job);
  }
  return job;
}

/** Start a tuning run in the server (202); an APIError with status 409 while one runs. */
export function startTune(options: ITuneOptions = {}): Promise<ITuneJob> {
  return requestAPI<ITuneJob>('tune', {
    method: 'POST',
    body: JSON.stringify(options)
  });
}

export function tuneJob(id: string): Promise<ITuneJob> {
  return requestAPI<ITuneJob>(`tune/${id}`);
}

/** The server's running tuning run, else the one started last; null when it has started none. */
export async function currentTune(): Promise<ITuneJob | null> {
  try {
    return await requestAPI<ITuneJob>('tune');
  } catch (error) {
    if (error instanceof APIError && error.status === 404) {
      return null;
    }
    throw error;
  }
}

/** Poll a tuning run every second until it ends; `onProgress` sees every answer on the way. */
export async function waitForTune(
  job: ITuneJob,
  onProgress?: (job: ITuneJob) => void
): Promise<ITuneJob> {
  while (job.state === 'running') {
    await new Promise(resolve => setTimeout(resolve, 1000));
    job = await tuneJob(job.job);
    onProgress?.(job);
  }
  return job;
}

/**
 * A tuning run in one line: `Tuning: training 40%` while it runs, then `Adopted v2: ...`, the
 * gate's `keep the current model: ...`, or `Tuning failed: ...`.
 */
export function tuneLine(job: ITuneJob): string {
  const report = job.report;
  if (job.state === 'running' || report === null) {
    return `Tuning: ${job.phase} ${Math.round(job.fraction * 100)}%`;
  }
  if ('error' in report) {
    return `Tuning failed: ${report.error}`;
  }
  return report.adopted
    ? `Adopted ${report.version}: ${report.reason}`
    : report.reason;
}

/**
 * An index run in one line: the server's progress line while it runs (`embedding chunks 120/370 ·
 * 12.1 chunks/s · about 25 s left`), `done — 53 files, 370 chunks in 23.4 s` at the end, or why
 * it failed.
 */
export function indexLine(job: IIndexJob): string {
  if (job.state === 'error') {
    return `Indexing failed: ${job.error}`;
  }
  if (job.state === 'queued') {
    return 'Indexing: waiting for the run before it';
  }
  return job.progress.text;
}

/** A kernel that captures its executed cells into this memory (`GET /nbmemory/capture`). */
export interface ICaptureKernel {
  pid: number;
  /** The notebook the kernel runs, relative to the server root; null when none is known. */
  notebook: string | null;
  /** When it began capturing (ISO time). */
  since: string;
  /** Cells captured so far. */
  runs: number;
}

/** Capture of executed cells, as `GET /nbmemory/capture` and `PUT` answer it. */
export interface ICaptureState {
  /** Every new Python kernel this server starts captures its cells. */
  server_wide: boolean;
  /** NBMEMORY_CAPTURE=0 in the server's environment turns capture off. */
  env_off: boolean;
  kernels: ICaptureKernel[];
}

export type AgentMode = 'on' | 'read-only' | 'off';
export const AGENT_MODES: AgentMode[] = ['on', 'read-only', 'off'];

/** nbmemory's tools for Jupyter AI's agents, as `GET /nbmemory/agents` and `PUT` answer them. */
export interface IAgentsState {
  /** Whether the tools are installed in this server (jupyter-server-mcp). */
  installed: boolean;
  mode: AgentMode;
  /** The tools agents may call in this mode. */
  tools: string[];
  url: string | null;
}

/** How far the memory's passages are: stored, and how many its chunks need. */
export interface IRefine {
  done: number;
  total: number;
}

/** The attached team memory, as `Memory.stats()` says it (`Team.status` in nbmemory/team.py). */
export interface ITeamStats {
  /** The catalog, its password masked: `postgres:dbname=lab host=db`, or a `.ducklake` file. */
  catalog: string;
  data_path: string;
  /** Items in this machine's copy of the team memory. */
  items: number;
  /** The lake's snapshot that copy has applied; null before it has read one. */
  snapshot: number | null;
  /** Why the catalog cannot be reached (searches then use this machine's copy); null when it answers. */
  unreachable: string | null;
}

/** `GET /nbmemory/stats`, the parts the sidebar reads. */
export interface IStats {
  refine?: IRefine;
  /** Absent when no team memory is attached. */
  team?: ITeamStats;
  [key: string]: unknown;
}

/** A built-in notebook the server can copy (`GET /nbmemory/notebooks`). */
export interface IBuiltinNotebook {
  name: string;
  title: string;
  file: string;
}

/**
 * Call an endpoint that an older or partial server may not have: null on its 404 (the front end
 * then shows nothing of it); any other failure throws as `requestAPI` does.
 */
export async function optionalAPI<T>(
  endpoint: string,
  init: RequestInit = {}
): Promise<T | null> {
  try {
    return await requestAPI<T>(endpoint, init);
  } catch (error) {
    if (error instanceof APIError && error.status === 404) {
      return null;
    }
    throw error;
  }
}

export function getCapture(): Promise<ICaptureState | null> {
  return optionalAPI<ICaptureState>('capture');
}

/** Make every new Python kernel of this server capture its cells, or stop that. */
export function setCapture(serverWide: boolean): Promise<ICaptureState | null> {
  return optionalAPI<ICaptureState>('capture', {
    method: 'PUT',
    body: JSON.stringify({ server_wide: serverWide })
  });
}

export function getAgents(): Promise<IAgentsState | null> {
  return optionalAPI<IAgentsState>('agents');
}

export function setAgents(mode: AgentMode): Promise<IAgentsState | null> {
  return optionalAPI<IAgentsState>('agents', {
    method: 'PUT',
    body: JSON.stringify({ mode })
  });
}

export function getStats(): Promise<IStats | null> {
  return optionalAPI<IStats>('stats');
}

/** The built-in notebooks the server offers; empty when it offers none (no endpoint). */
export async function builtinNotebooks(): Promise<IBuiltinNotebook[]> {
  const listed = await optionalAPI<{ notebooks: IBuiltinNotebook[] }>(
    'notebooks'
  );
  return listed?.notebooks ?? [];
}

/** Copy the built-in notebook `name` into `dir` (relative to the server root, '' the root). */
export function copyNotebook(
  name: string,
  dir: string
): Promise<{ path: string }> {
  return requestAPI<{ path: string }>('notebooks', {
    method: 'POST',
    body: JSON.stringify({ name, dir })
  });
}

/** A count as people read it: `11,345`. */
export function formatCount(value: number): string {
  return value.toLocaleString('en-US');
}

/** How many of `names` a line shows before `+N more`. */
const NAMES_SHOWN = 3;

function someNames(names: string[]): string {
  const shown = names.slice(0, NAMES_SHOWN).join(', ');
  const rest = names.length - NAMES_SHOWN;
  return rest > 0 ? `${shown} +${rest} more` : shown;
}

/** A capturing kernel by its notebook's name, else its process id. */
function kernelName(kernel: ICaptureKernel): string {
  return kernel.notebook ? baseName(kernel.notebook) : `pid ${kernel.pid}`;
}

/**
 * Capture in one line: `Capture: on in 2 kernels (a.ipynb, b.ipynb)` or `Capture: off`, with
 * `new kernels are captured` when the server turns it on in every kernel it starts, and
 * `NBMEMORY_CAPTURE=0 turns it off` when the server's environment does (its kernels inherit it;
 * a kernel that runs `%memcapture on` still captures).
 */
export function captureLine(state: ICaptureState): string {
  const n = state.kernels.length;
  const parts: string[] = [];
  if (n > 0) {
    const names = someNames(state.kernels.map(kernelName));
    parts.push(`on in ${n} ${n === 1 ? 'kernel' : 'kernels'} (${names})`);
  } else {
    parts.push(state.server_wide && !state.env_off ? 'no kernel yet' : 'off');
  }
  if (state.env_off) {
    parts.push(
      `NBMEMORY_CAPTURE=0 turns it off${n > 0 ? ' in other kernels' : ''}`
    );
  } else if (state.server_wide) {
    parts.push('new kernels are captured');
  }
  return `Capture: ${parts.join(' · ')}`;
}

/** Each capturing kernel on a line of its own: notebook, process, since when, cells captured. */
export function captureDetails(state: ICaptureState): string {
  const lines: string[] = [];
  if (state.env_off && state.server_wide) {
    lines.push(
      "Capture cells of every kernel is on, but NBMEMORY_CAPTURE=0 in the server's environment turns it off in the kernels it starts"
    );
  }
  return lines
    .concat(
      state.kernels.map(kernel => {
        const since = new Date(kernel.since);
        const when = isNaN(since.getTime())
          ? kernel.since
          : since.toLocaleString();
        const runs = `${formatCount(kernel.runs)} ${kernel.runs === 1 ? 'cell' : 'cells'}`;
        return `${kernel.notebook ?? '(no notebook)'}: pid ${kernel.pid}, since ${when}, ${runs}`;
      })
    )
    .join('\n');
}

/**
 * The agents' tools in one line: `Agents in this Lab: search, remember, forget`, with
 * `(read-only)` in that mode, or `Agents: off`; null when the tools are not installed.
 */
export function agentsLine(state: IAgentsState): string | null {
  if (!state.installed) {
    return null;
  }
  if (state.mode === 'off') {
    return 'Agents: off';
  }
  const tools = state.tools.length ? someNames(state.tools) : 'no tools';
  return `Agents in this Lab: ${tools}${state.mode === 'read-only' ? ' (read-only)' : ''}`;
}

/**
 * `refining: 2,140 of 11,345 passages` while the memory's passages are being added after a fast
 * first index; null when they are all there or the server does not say.
 */
export function refineLine(stats: IStats | null): string | null {
  const refine = stats?.refine;
  if (
    !refine ||
    typeof refine.done !== 'number' ||
    typeof refine.total !== 'number' ||
    refine.done >= refine.total
  ) {
    return null;
  }
  return `refining: ${formatCount(refine.done)} of ${formatCount(refine.total)} passages`;
}

/**
 * The team memory in one line: `team: postgres:dbname=lab host=db · 1,234 items · snapshot 57`,
 * or, when its catalog cannot be reached, `team unreachable: <why> — searching this machine's
 * copy (snapshot 57)`; null when no team is attached.
 */
export function teamLine(stats: IStats | null): string | null {
  const team = stats?.team;
  if (!team || typeof team.catalog !== 'string') {
    return null;
  }
  const snapshot =
    typeof team.snapshot === 'number' ? `snapshot ${team.snapshot}` : null;
  if (team.unreachable) {
    return `team unreachable: ${team.unreachable} — searching this machine's copy (${snapshot ?? 'no snapshot read yet'})`;
  }
  const items = `${formatCount(team.items)} ${team.items === 1 ? 'item' : 'items'}`;
  return [`team: ${team.catalog}`, items, snapshot].filter(Boolean).join(' · ');
}

/** `bm25 0.0475 + cosine 0.4594 + passage 0.0200`: what a score is made of. */
export function formatParts(parts: { [part: string]: number } = {}): string {
  return Object.entries(parts)
    .filter(([, value]) => value !== 0)
    .map(([name, value]) => `${name} ${value.toFixed(4)}`)
    .join(' + ');
}

/** `bm25 #2 · vector #5`: the rank each retriever gave a hit. */
export function formatRanks(ranks: { [retriever: string]: number }): string {
  return Object.keys(ranks)
    .sort()
    .map(name => `${name} #${ranks[name]}`)
    .join(' · ');
}

/** The last part of a path. */
export function baseName(path: string): string {
  const parts = path.split(/[\\/]/);
  return parts[parts.length - 1] || path;
}

/**
 * Where a hit is, for people: `deploy.ipynb, cell 7` (cells count from 1, as the status bar
 * does), `notes.md, lines 12–30`, `paper.pdf, page 3`, `team.chat, message 4 (Ada)`,
 * `(remembered)`.
 */
export function locationLabel(hit: IHit): string {
  const file = hit.path ?? hit.source;
  if (!file) {
    return '(remembered)';
  }
  const name = baseName(file);
  if (hit.kind === 'chat' && hit.cell_index !== null) {
    const speaker = hit.speaker ? ` (${hit.speaker})` : '';
    return `${name}, message ${hit.cell_index + 1}${speaker}`;
  }
  if (hit.cell_index !== null) {
    // The kernel's history notebook names its cells by execution count (cell id `in-N`).
    if (hit.cell_id === `in-${hit.cell_index}`) {
      return `${name}, In [${hit.cell_index}]`;
    }
    return `${name}, cell ${hit.cell_index + 1}`;
  }
  if (hit.page !== null && hit.page !== undefined) {
    return `${name}, page ${hit.page}`;
  }
  if (hit.line_start !== null) {
    if (hit.line_end !== null && hit.line_end !== hit.line_start) {
      return `${name}, lines ${hit.line_start}\u2013${hit.line_end}`;
    }
    return `${name}, line ${hit.line_start}`;
  }
  return name;
}
