// The Fastify ecosystem's style: neostandard (standard + typescript-eslint), a few rules tuned below.
import neostandard, { resolveIgnoresFromGitignore } from 'neostandard'

export default [
  ...neostandard({
    ts: true,
    // What git ignores (builds, coverage, node_modules), the benchmark reports and third-party files.
    ignores: [...resolveIgnoresFromGitignore(), 'benchmarks/results/', 'lib/tower/vendor/']
  }),
  {
    rules: {
      // `void promise` is how this code marks a promise it deliberately does not await.
      'no-void': ['error', { allowAsStatement: true }],
      // It cannot see a flag set by a callback or another task, which is how these loops end.
      'no-unmodified-loop-condition': 'off',
      // Nested promises need names that tell them apart (resolveEnd, resolveEvent).
      'promise/param-names': 'off',
      // Meant for Node-style callbacks (none here); it misreads a parameter property named `error`.
      'n/handle-callback-err': 'off',
      // A `let` that a teardown closure reads before the test assigns it cannot be a `const`.
      'prefer-const': ['error', { destructuring: 'all', ignoreReadBeforeAssign: true }]
    }
  },
  {
    // Tower's dashboard runs in the browser.
    files: ['lib/tower/public/**/*.js'],
    languageOptions: { globals: { ResizeObserver: 'readonly' } }
  }
]
