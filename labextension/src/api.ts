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
  cell_index: number | null;
  line_start: number | null;
  line_end: number | null;
  tags: string[];
  importance: number;
  location: string;
  found_by: string[];
  ranks: { [retriever: string]: number };
}

export interface ISearchResult {
  query: string;
  k: number;
  ms: number;
  hits: IHit[];
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

export interface IIndexJob {
  id: string;
  state: 'queued' | 'running' | 'done' | 'error';
  done: number;
  total: number;
  current: string | null;
  paths: string[];
  error: string | null;
  report: { summary: string } | null;
}

export interface ISearchOptions {
  k?: number;
  namespace?: string;
  kind?: string;
  explain?: boolean;
}

/** Call the nbmemory REST API; a non-2xx answer throws an Error carrying the server's message. */
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
    throw new Error(data.message || `${response.status} ${response.statusText}`);
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
  return requestAPI<ISearchResult>(`search?${params.toString()}`);
}

export function remember(
  text: string,
  options: { tags?: string[]; importance?: number; namespace?: string } = {}
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
  onProgress?: (job: IIndexJob) => void
): Promise<IIndexJob> {
  while (job.state === 'queued' || job.state === 'running') {
    await new Promise(resolve => setTimeout(resolve, 500));
    job = await indexJob(job.id);
    onProgress?.(job);
  }
  return job;
}

/** `bm25 #2 · vector #5`: the rank each retriever gave a hit. */
export function formatRanks(ranks: { [retriever: string]: number }): string {
  return Object.keys(ranks)
    .sort()
    .map(name => `${name} #${ranks[name]}`)
    .join(' · ');
}
