/**
 * How to start a sibling worker module. From the built dist/ the worker is plain .js. Under vitest and
 * tsx the code runs from .ts sources; Node 20 does not apply `execArgv: ['--import', 'tsx']` to a
 * worker's entry ("Unknown file extension .ts", measured on 20.20), so the worker starts from a small
 * eval'd bootstrap that loads the .ts entry through tsx's `tsImport` (tsx is a devDependency).
 */
export function workerEntry(fromUrl: string, baseName: string): { filename: string | URL; eval: boolean } {
  const ts = new URL(fromUrl).pathname.endsWith('.ts');
  const url = new URL(`./${baseName}${ts ? '.ts' : '.js'}`, fromUrl);
  if (!ts) return { filename: url, eval: false };
  const api = import.meta.resolve('tsx/esm/api');
  const code =
    `import(${JSON.stringify(api)}).then((m) => m.tsImport(${JSON.stringify(url.href)}, ${JSON.stringify(fromUrl)}))` +
    `.catch((e) => { process.nextTick(() => { throw e; }); });`;
  return { filename: code, eval: true };
}
