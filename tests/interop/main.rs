//! Other languages on one queue: the Python (kazoo) and Node (node-zookeeper-client)
//! producers, and a consumer written to the 000 design beside ours.
//! Needs: ZooKeeper (`make zk-up`), Python with kazoo and Node with node-zookeeper-client
//! (`make tools`).

mod interop;
mod producer_fields;
mod rails;
