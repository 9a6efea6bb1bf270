import wandb from '@wandb/sdk';
const run = await wandb.init({project: 'proj', entity: 'tester', id: 'rec-1', name: 'recorded', config: {lr: 0.01, layers: 2}});
for (let s = 1; s <= 3; s++) { wandb.log({'train/loss': 4 - s * 0.5}, s); await new Promise(r => setTimeout(r, 100)); }
await wandb.finish(0);
