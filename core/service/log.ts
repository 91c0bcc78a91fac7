/** The logging surface core/service needs; a pino logger satisfies it. Never given a secret. */
export interface ServiceLogger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  /** Whether a level is logged (pino's); without it every level is assumed on. */
  isLevelEnabled?(level: 'debug' | 'info' | 'warn' | 'error'): boolean;
}

export const silentLogger: ServiceLogger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};
