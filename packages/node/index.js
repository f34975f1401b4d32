'use strict';
/**
 * event-bridge for Node: publish tasks to its queue on ZooKeeper (node-zookeeper-client), and
 * receive them as signed webhooks that may suspend with a checkpoint.
 *
 * - producer: `connect`, `publish` (and the `event-bridge-publish` command);
 * - kick: `Kick`, a drain of process_events started once tasks landed;
 * - webhooks: `verify` and `Delivery`, the Standard Webhooks check of a delivery and what its
 *   headers and envelope say;
 * - resume: `checkpoint`, `resumeIn` and `waitFor`, the 202 answers that suspend a task.
 */

const { Kick } = require('./kick');
const producer = require('./producer');
const resume = require('./resume');
const webhooks = require('./webhooks');

module.exports = {
  ...producer,
  ...webhooks,
  ...resume,
  Kick,
  /** event-bridge's one version, the same for the crate, the gem and the Python package. */
  version: require('./package.json').version,
};
