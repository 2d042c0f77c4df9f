// ESLint for the TypeScript sources, as the JupyterLab extension template sets it up: eslint's and
// typescript-eslint's recommended rules, the Jupyter plugin's checks of plugins, commands and
// signals, and prettier's formatting reported as lint.
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import jupyter from '@jupyter/eslint-plugin';
import prettierRecommended from 'eslint-plugin-prettier/recommended';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig([
  { ignores: ['node_modules', 'lib', '**/*.js', '**/*.d.ts'] },
  js.configs.recommended,
  tseslint.configs.recommended,
  jupyter.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: {
      globals: globals.browser,
      parserOptions: { project: 'tsconfig.json', sourceType: 'module' }
    },
    rules: {
      '@typescript-eslint/naming-convention': [
        'error',
        {
          selector: 'interface',
          format: ['PascalCase'],
          custom: { regex: '^I[A-Z]', match: true }
        }
      ],
      '@typescript-eslint/no-unused-vars': ['error', { args: 'none' }],
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-namespace': 'off',
      curly: ['error', 'all'],
      eqeqeq: 'error',
      'prefer-arrow-callback': 'error',
      // The sidebar speaks English only: it takes no ITranslator, and adding one is a feature.
      'jupyter/no-untranslated-string': 'off',
      // Argument schemas for the commands would be new metadata, not a fix.
      'jupyter/command-described-by': 'off'
    }
  },
  prettierRecommended
]);
